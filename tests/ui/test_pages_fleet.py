"""The fleet pages show what the database holds: queues with their counts, pause and resume
through the page (the database changes), workers live and stale, the overview's alerts,
the schedules with their next fire times, the limits; values from the database render as
text; a database outage answers with the banner, not a 500. In-process app over the test's
own schema (tests/ui/inprocess.py)."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

import asyncpg
import pytest

from taskq_cli.ui.config import UiConfig
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import ErrorInfo, LimitDefinition, WorkerInfo
from taskq_core.client import JobsClient
from tests.conformance.states import args, running_job
from tests.conftest import PgTarget
from tests.tui.proxy import PostgresProxy
from tests.ui.fleet_client import HTMX, SAME_ORIGIN
from tests.ui.fleet_client import open_fleet_ui as open_ui

pytestmark = [pytest.mark.postgres]

TOKEN = "fleet-metrics-token-0123456789"
PAGES = ("/", "/queues", "/workers", "/schedules", "/limits")


async def _worker(
    backend: PostgresBackend, queues: list[str], *, label: str, leader: bool = False
) -> UUID:
    worker = uuid4()
    info = WorkerInfo(worker, "node-a", 4100, queues, ["work"], 4, label=label, version="1.2")
    await backend.register_worker(info)
    if leader:
        assert await backend.try_acquire_leadership(worker)
    return worker


async def _silence(pg: PgTarget, worker: UUID) -> None:
    """The worker's last heartbeat ten minutes ago: stale, as a dead worker's row is."""
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(
            f"UPDATE {pg.schema}.workers SET last_seen_at = now() - interval '10 minutes'"
            " WHERE id = $1",
            worker,
        )
    finally:
        await conn.close()


async def test_the_queues_page_shows_the_counts_the_database_holds(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        backend = ui.backend
        for _ in range(3):
            await backend.enqueue(args(queue="emails"))
        await backend.enqueue(args(queue="emails", delay=timedelta(hours=1)))
        await running_job(backend, queue="media")
        failed, _ = await running_job(backend, queue="media", retry_kind="non_retryable")
        error = ErrorInfo("KeyError", "'region'", "KeyError: 'region'")
        assert await backend.mark_failed_or_retry(failed.lease(), error, None) is not None
        await backend.update_queue("media", mode="round_robin", max_concurrent=7)

        view = (await ui.client.get("/api/queues")).json()
        queues = {q["name"]: q for q in view["queues"]}
        assert set(queues) == {"emails", "media"}
        emails, media = queues["emails"], queues["media"]
        assert (emails["pending"], emails["scheduled"], emails["running"]) == (3, 1, 0)
        assert emails["oldest_pending_at"] is not None and not emails["paused"]
        assert (media["pending"], media["running"], media["failed"]) == (0, 1, 1)
        assert (media["mode"], media["max_concurrent"]) == ("round_robin", 7)

        page = (await ui.client.get("/queues")).text
        assert 'hx-get="/queues?part=live"' in page
        live = (await ui.client.get("/queues?part=live")).text
        assert "<html" not in live
        row = live.split('data-queue="media"')[1].split("</tr>")[0]
        assert "round_robin" in row and ">7<" in row


async def test_pause_and_resume_from_the_page_change_the_database(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        await ui.backend.enqueue(args(queue="emails"))
        form = await ui.client.get("/queues/emails/pause")
        assert form.status_code == 200 and 'name="reason"' in form.text

        paused = await ui.client.post(
            "/queues/emails/pause", data={"reason": "deploy 4.2"}, headers=SAME_ORIGIN
        )
        assert paused.status_code == 303 and paused.headers["location"] == "/queues"
        row = await ui.backend.get_queue("emails")
        assert row is not None and row.paused and row.pause is not None
        assert row.pause.reason == "deploy 4.2"
        assert row.pause.paused_by is not None and row.pause.paused_by.endswith("(web UI)")

        page = (await ui.client.get("/queues")).text
        assert "deploy 4.2" in page and "(web UI)" in page and "Resume" in page
        overview = (await ui.client.get("/api/overview")).json()
        assert ("paused_queue", "emails") in {(a["kind"], a["subject"]) for a in overview["alerts"]}

        resumed = await ui.client.post("/queues/emails/resume", headers={**SAME_ORIGIN, **HTMX})
        assert resumed.status_code == 200
        assert "<html" not in resumed.text and 'data-queue="emails"' in resumed.text
        row = await ui.backend.get_queue("emails")
        assert row is not None and not row.paused

        unknown = await ui.client.post(
            "/queues/emial/pause", data={"reason": "typo"}, headers=SAME_ORIGIN
        )
        assert unknown.status_code == 404
        typo = await ui.backend.get_queue("emial")
        assert typo is None or not typo.has_row  # no queue was made for it

        nul = await ui.client.post(
            "/queues/emails/pause", data={"reason": "a\x00b"}, headers=SAME_ORIGIN
        )
        assert nul.status_code == 400


async def test_workers_and_the_overview_show_live_stale_and_the_alerts(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        backend = ui.backend
        await _worker(backend, ["media"], label="media-1", leader=True)
        silent = await _worker(backend, ["reports"], label="reports-1")
        await _silence(pg, silent)
        await backend.enqueue(args(queue="reports"))  # only the silent worker consumes it
        await backend.enqueue(args(queue="media"))

        workers = (await ui.client.get("/api/workers")).json()
        states = {w["label"]: (w["state"], w["is_leader"]) for w in workers["workers"]}
        assert states == {"media-1": ("running", True), "reports-1": ("stale", False)}
        assert (workers["running"], workers["stale"]) == (1, 1)
        page = (await ui.client.get("/workers?part=live")).text
        stale_row = page.split(f'data-worker="{silent}"')[1].split("</tr>")[0]
        assert ">stale<" in stale_row and "reports-1" in stale_row

        overview = (await ui.client.get("/api/overview")).json()
        assert overview["leader"]["name"] == "media-1 (node-a:4100)"
        assert overview["totals"]["pending"] == 2
        alerts = {(a["kind"], a["subject"]) for a in overview["alerts"]}
        assert alerts == {
            ("stranded_queue", "reports"),
            ("stale_worker", "reports-1 (node-a:4100)"),
        }
        html = (await ui.client.get("/")).text
        assert "no live worker consumes this queue" in html and "silent for 10m" in html
        assert "<svg" in html  # the throughput sparkline


async def test_the_schedules_page_lists_the_next_fire_times(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        client = JobsClient(backend=ui.backend)
        await client.open()
        await client.create_schedule(
            "nightly", "build_report", "0 3 * * *", payload={"full": True}, timezone="Europe/Berlin"
        )
        await client.create_schedule("hourly", "ping", "0 * * * *")
        await client.update_schedule("hourly", enabled=False)

        view = (await ui.client.get("/api/schedules")).json()
        by_name = {s["name"]: s for s in view["schedules"]}
        nightly = by_name["nightly"]
        assert (nightly["cron"], nightly["timezone"], nightly["enabled"]) == (
            "0 3 * * *",
            "Europe/Berlin",
            True,
        )
        assert len(nightly["next_fires"]) == 5
        assert all("T03:00:00+0" in fire for fire in nightly["next_fires"])
        assert by_name["hourly"]["next_fires"] == [] and not by_name["hourly"]["enabled"]

        page = (await ui.client.get("/schedules")).text
        row = page.split('data-schedule="nightly"')[1].split("</tr>")[0]
        assert "0 3 * * *" in row and "Europe/Berlin" in row and "5 next" in row
        assert "none while disabled" in page.split('data-schedule="hourly"')[1]


async def test_the_limits_page_shows_each_limit_and_its_use(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        await ui.backend.register_rate_limits(
            [
                LimitDefinition("smtp", "token_bucket", 10, per_second=10),
                LimitDefinition("gpu", "reservation", 2),
            ]
        )
        view = (await ui.client.get("/api/limits")).json()
        limits = {item["name"]: item for item in view["limits"]}
        assert limits["smtp"]["rule"] == "token bucket 10/s, burst 10"
        assert (limits["gpu"]["used"], limits["gpu"]["unit"]) == (0, "slots")
        page = (await ui.client.get("/limits")).text
        assert "token bucket 10/s, burst 10" in page and "0 of 2 slots" in page


async def test_values_from_the_database_render_as_text(pg: PgTarget) -> None:
    script = "<script>alert(1)</script>"
    image = "<img src=x onerror=alert(2)>"
    async with open_ui(pg) as ui:
        await ui.backend.enqueue(args(queue=script))
        worker = await _worker(ui.backend, [script], label=image)
        await _silence(pg, worker)
        await ui.backend.enqueue(args(queue="emails"))
        paused = await ui.client.post("/api/queues/emails/pause", json={"reason": "<b>bold</b>"})
        assert paused.status_code == 200
        for path in (*PAGES, "/queues?part=live", "/workers?part=live", "/?part=live"):
            text = (await ui.client.get(path)).text
            assert script not in text and image not in text and "<b>bold" not in text, path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in (await ui.client.get("/queues")).text
        assert "&lt;img src=x onerror=alert(2)&gt;" in (await ui.client.get("/workers")).text
        assert "&lt;b&gt;bold&lt;/b&gt;" in (await ui.client.get("/")).text


async def test_pausing_a_paused_queue_keeps_the_first_note(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        await ui.backend.enqueue(args(queue="emails"))
        first = await ui.client.post("/api/queues/emails/pause", json={"reason": "disk full"})
        assert first.status_code == 200 and first.json()["pause"]["reason"] == "disk full"
        again = await ui.client.post("/api/queues/emails/pause", json={"reason": "deploy"})
        assert again.status_code == 200
        assert again.json()["pause"]["reason"] == "disk full"  # the first operator's note


async def test_a_database_outage_answers_with_the_banner(pg: PgTarget) -> None:
    async with PostgresProxy(pg.dsn) as proxy, open_ui(pg, dsn=proxy.dsn) as ui:
        await ui.backend.enqueue(args(queue="emails"))
        assert (await ui.client.get("/queues")).status_code == 200

        await proxy.stop()
        page = await ui.client.get("/queues")
        assert page.status_code == 503
        assert 'id="banner"' in page.text and "database unreachable: " in page.text
        assert '<meta http-equiv="refresh"' in page.text
        live = await ui.client.get("/queues?part=live", headers=HTMX)
        assert live.status_code == 503
        assert live.headers["content-type"].startswith("text/plain")
        assert live.text.startswith("database unreachable: ")
        api = await ui.client.get("/api/overview")
        assert api.status_code == 503 and api.json()["detail"].startswith("database unreachable")
        schedules = await ui.client.get("/schedules")
        assert schedules.status_code == 503

        await proxy.start()
        # The pool notices its dead connections on first use; a read or two later it is back.
        statuses = [(await ui.client.get("/queues")).status_code for _ in range(5)]
        assert statuses[-1] == 200, statuses


async def test_the_openapi_document_describes_the_json_twins(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        bearer = {"authorization": f"Bearer {TOKEN}"}
        document = (await ui.client.get("/api/openapi.json", headers=bearer)).json()
        paths = document["paths"]
        assert "/api/overview" in paths
        for page in PAGES[1:]:
            path = f"/api{page}"
            answers = paths[path]["get"]["responses"]
            assert "$ref" in answers["200"]["content"]["application/json"]["schema"], path
            assert {"401", "503"} <= set(answers), path  # the middleware's and the outage's
        pause = paths["/api/queues/{name}/pause"]["post"]["responses"]
        assert {"200", "401", "403", "404", "503"} <= set(pause)
        assert document["components"]["securitySchemes"]["token"]["scheme"] == "bearer"
        assert not any(path in paths for path in PAGES)  # pages are HTML, not API
        assert {"QueuesView", "WorkersView", "Overview"} <= set(document["components"]["schemas"])


async def test_the_fleet_metrics_are_served_at_metrics(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN), metrics=True) as ui:
        await ui.backend.enqueue(args(queue="emails"))
        assert (await ui.client.get("/metrics")).status_code == 401
        scrape = await ui.client.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        assert scrape.status_code == 200
        assert scrape.headers["content-type"].startswith("text/plain")
        assert "taskq_fleet_up 1.0" in scrape.text
        assert 'taskq_fleet_jobs{queue="emails",status="pending"} 1.0' in scrape.text
