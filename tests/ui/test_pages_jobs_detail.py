"""A job's page shows what the database holds of it (payload, result or error with its
traceback, progress, attempts, events, the explain answer), an archived job with its banner,
and its retry and cancel change the database (page forms, htmx and JSON alike, refused
when read-only); unknown, malformed and partial ids answer as the CLI names jobs."""

from __future__ import annotations

import json
from datetime import timedelta
from uuid import uuid4

import asyncpg
import pytest

from taskq_cli.ui.config import UiConfig
from taskq_core.backend.protocol import PrunePolicy
from taskq_core.statemachine import JobStatus
from tests.conformance.states import args
from tests.conftest import PgTarget
from tests.ui.inprocess import SAME_ORIGIN, open_ui
from tests.ui.job_pages import HTMX, set_times
from tests.ui.states import TRACEBACK, job_in

pytestmark = [pytest.mark.postgres]


def _section(html: str, name: str) -> str:
    """One section of the job's page (``<section ... id="name">`` to its end)."""
    start = html.index(f'id="{name}"')
    return html[start : html.index("</section>", start)]


async def test_the_page_shows_what_the_job_carried_and_how_it_ended(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        failed = await job_in(ui.backend, JobStatus.FAILED, payload={"url": "u", "width": 100})
        page = await ui.client.get(f"/jobs/{failed.id}")
        assert page.status_code == 200
        html = page.text
        assert "&#34;width&#34;: 100" in _section(html, "payload")
        error = _section(html, "error")
        assert "ConnectionResetError</strong>: upstream closed the connection" in error
        assert "image = await fetch(payload.url)" in error  # the traceback
        attempts = _section(html, "attempts")
        assert "Attempts (1)" in attempts and "status-failed" in attempts
        events = _section(html, "events")
        assert "pending → running" in events and "running → failed" in events
        assert "Why: finished" in _section(html, "explain")
        assert f'href="/jobs/{failed.id}/retry"' in html  # failed: it can be retried
        assert f'href="/jobs/{failed.id}/cancel"' not in html

        done = await job_in(ui.backend, JobStatus.SUCCEEDED)
        html = (await ui.client.get(f"/jobs/{done.id}")).text
        assert "&#34;ok&#34;: true" in _section(html, "result")
        assert 'id="error"' not in html

        # Waiting with no worker: explain says what blocks it, check by check.
        waiting = await ui.backend.enqueue(args(queue="nobody-reads"))
        html = (await ui.client.get(f"/jobs/{waiting.id}?part=live")).text
        explain = _section(html, "explain")
        assert "Why: blocked" in explain and "BLOCKS" in explain
        assert "no_live_worker" in explain
        assert f'href="/jobs/{waiting.id}/cancel"' in html

        document = (await ui.client.get(f"/api/jobs/{failed.id}")).json()
        assert document["job"]["error_traceback"] == TRACEBACK
        assert [a["outcome"] for a in document["attempts"]] == ["failed"]
        assert [(e["from_status"], e["to_status"]) for e in document["events"]] == [
            ("pending", "running"),
            ("running", "failed"),
        ]
        assert document["explanation"]["label"] == "finished"
        assert (document["can_retry"], document["can_cancel"]) == (True, False)
        assert document["archived"] is None


async def test_a_running_job_shows_its_latest_progress(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        running = await job_in(ui.backend, JobStatus.RUNNING)
        state = {
            "current": 40,
            "total": 160,
            "message": "resizing <b>tiles</b>",
            "ts": "2026-05-01T12:00:00+00:00",
        }
        conn = await asyncpg.connect(pg.dsn)
        try:
            await conn.execute(
                f"UPDATE {pg.schema}.jobs SET progress_seq = 3, progress_state = $2::jsonb"
                " WHERE id = $1",
                running.id,
                json.dumps(state),
            )
        finally:
            await conn.close()
        progress = _section((await ui.client.get(f"/jobs/{running.id}")).text, "progress")
        assert 'value="25.0"' in progress and "40 of 160" in progress
        assert "resizing &lt;b&gt;tiles&lt;/b&gt;" in progress
        assert 'reported <time datetime="2026-05-01T12:00:00+00:00"' in progress
        document = (await ui.client.get(f"/api/jobs/{running.id}")).json()
        assert document["job"]["progress"]["percent"] == 25.0


async def test_an_archived_job_opens_with_its_banner_and_takes_no_action(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        failed = await job_in(ui.backend, JobStatus.FAILED, queue="pruned")
        await set_times(
            pg, failed.id, created_ago=timedelta(days=3), finished_ago=timedelta(days=2)
        )
        policy = PrunePolicy({JobStatus.FAILED: timedelta(days=1)}, timedelta(days=30))
        assert (await ui.backend.prune_jobs(policy)).total == 1
        archived = await ui.backend.get_archived_job(failed.id)
        assert archived is not None

        html = (await ui.client.get(f"/jobs/{failed.id}")).text
        banner = html[
            html.index('id="archived"') : html.index("</div>", html.index('id="archived"'))
        ]
        assert "Archived" in banner and "events were deleted then, by design" in banner
        assert "Events (deleted)" in _section(html, "events")
        assert "status-failed" in _section(html, "attempts")  # attempts are kept
        assert "Why: archived" in _section(html, "explain")
        assert "/retry" not in html and "/cancel" not in html

        refused = await ui.client.post(f"/jobs/{failed.id}/retry", headers=HTMX)
        assert refused.status_code == 409 and "archived" in refused.text
        assert await ui.backend.get(failed.id) is None  # still only in the archive
        document = (await ui.client.get(f"/api/jobs/{failed.id}")).json()
        assert document["archived"]["events_deleted"] is True
        assert document["can_retry"] is False


async def test_retry_and_cancel_change_the_database(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        backend = ui.backend
        failed = await job_in(backend, JobStatus.FAILED)
        # A plain form: the database changes, and the page it redirects to says so.
        response = await ui.client.post(f"/jobs/{failed.id}/retry", headers=SAME_ORIGIN)
        assert response.status_code == 303
        assert response.headers["location"] == f"/jobs/{failed.id}?outcome=retried"
        row = await backend.get(failed.id)
        assert row is not None and row.status is JobStatus.PENDING and row.attempts_used == 0
        page = (await ui.client.get(response.headers["location"])).text
        assert "retried: back to pending" in page

        # htmx: the live part comes back with the new status, the outcome beside it.
        waiting = await backend.enqueue(args(queue="mail"))
        response = await ui.client.post(
            f"/jobs/{waiting.id}/cancel", headers={**SAME_ORIGIN, **HTMX}
        )
        assert response.status_code == 200
        assert 'hx-swap-oob="true">cancelled</div>' in response.text
        assert '<span class="status status-cancelled">cancelled</span>' in response.text
        row = await backend.get(waiting.id)
        assert row is not None and row.status is JobStatus.CANCELLED
        assert row.cancel_reason == "cancelled from the web UI"

        # An action the job has moved past is refused and changes nothing.
        again = await ui.client.post(f"/jobs/{waiting.id}/cancel", headers={**SAME_ORIGIN, **HTMX})
        assert again.status_code == 409 and "already finished" in again.text
        plain = await ui.client.post(f"/jobs/{waiting.id}/cancel", headers=SAME_ORIGIN)
        assert plain.headers["location"] == f"/jobs/{waiting.id}?outcome=terminal"
        assert (
            "not cancelled: it has already finished"
            in (await ui.client.get(plain.headers["location"])).text
        )

        # A running job is asked to stop; its worker ends it.
        running = await job_in(backend, JobStatus.RUNNING, queue="media")
        asked = (await ui.client.post(f"/api/jobs/{running.id}/cancel")).json()
        assert (asked["outcome"], asked["done"], asked["status"]) == ("requested", True, "running")
        row = await backend.get(running.id)
        assert row is not None and row.cancel_requested_at is not None

        retried = (await ui.client.post(f"/api/jobs/{waiting.id}/retry")).json()
        assert (retried["outcome"], retried["done"], retried["status"]) == (
            "retried",
            True,
            "pending",
        )
        refused = (await ui.client.post(f"/api/jobs/{waiting.id}/retry")).json()
        assert (refused["outcome"], refused["done"]) == ("not_retried", False)


async def test_read_only_hides_the_actions_and_refuses_them(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(read_only=True)) as ui:
        failed = await job_in(ui.backend, JobStatus.FAILED)
        waiting = await ui.backend.enqueue(args(queue="mail"))
        for job in (failed, waiting):
            html = (await ui.client.get(f"/jobs/{job.id}")).text
            assert "/retry" not in html and "/cancel" not in html
        for path in (
            f"/jobs/{failed.id}/retry",
            f"/api/jobs/{failed.id}/retry",
            f"/jobs/{waiting.id}/cancel",
            f"/api/jobs/{waiting.id}/cancel",
        ):
            refused = await ui.client.post(path, headers=SAME_ORIGIN)
            assert refused.status_code == 403, path
            assert "read-only" in refused.text
        assert (await ui.backend.get(failed.id)).status is JobStatus.FAILED  # type: ignore[union-attr]
        assert (await ui.backend.get(waiting.id)).status is JobStatus.PENDING  # type: ignore[union-attr]


async def test_unknown_malformed_and_partial_ids(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        first = await ui.backend.enqueue(args(queue="ids"))
        second = await ui.backend.enqueue(args(queue="ids"))

        unknown = await ui.client.get(f"/jobs/{uuid4()}")
        assert unknown.status_code == 404 and "No such job" in unknown.text
        live = await ui.client.get(f"/jobs/{uuid4()}?part=live", headers=HTMX)
        assert live.status_code == 404 and live.headers["content-type"].startswith("text/plain")
        malformed = await ui.client.get("/jobs/not-a-job")
        assert malformed.status_code == 400 and "Not a job id" in malformed.text
        assert (await ui.client.get(f"/api/jobs/{uuid4()}")).status_code == 404
        assert (await ui.client.get("/api/jobs/not-a-job")).status_code == 400
        assert (await ui.client.post(f"/api/jobs/{uuid4()}/retry")).status_code == 404

        # A unique piece (or the id in capitals) leads to the job's own URL.
        for piece in (first.id.hex[-12:], str(first.id).upper()):
            found = await ui.client.get(f"/jobs/{piece}")
            assert found.status_code == 302, piece
            assert found.headers["location"] == f"/jobs/{first.id}"
        assert (await ui.client.get(f"/api/jobs/{first.id.hex[-12:]}")).json()["job"]["id"] == (
            str(first.id)
        )
        # A piece both ids share names no job: it says how many match.
        shared = ""
        for mine, theirs in zip(first.id.hex, second.id.hex, strict=True):
            if mine != theirs:
                break
            shared += mine
        ambiguous = await ui.client.get(f"/jobs/{shared}")
        assert ambiguous.status_code == 400 and "ambiguous" in ambiguous.text
