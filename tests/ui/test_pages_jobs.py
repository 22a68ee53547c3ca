"""The jobs page lists what the database holds: filters by status, queue, actor, creation
and finish time and batch narrow it (and its JSON twin alike), the next-page links walk
every job once and none twice while new jobs arrive, the URL is the filter's own, and a
filter it cannot read is a 400 saying why. In-process app over the test's own schema."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from taskq_core.statemachine import JobStatus
from tests.conformance.states import args
from tests.conftest import PgTarget
from tests.ui.inprocess import InProcessUi, open_ui
from tests.ui.job_pages import HTMX, job_ids, next_link, set_times
from tests.ui.states import job_in

pytestmark = [pytest.mark.postgres]


async def _listed(ui: InProcessUi, path: str) -> list[UUID]:
    response = await ui.client.get(path)
    assert response.status_code == 200, (path, response.text[:300])
    return job_ids(response.text)


async def _api_ids(ui: InProcessUi, path: str) -> list[UUID]:
    response = await ui.client.get(path)
    assert response.status_code == 200, (path, response.text[:300])
    return [UUID(job["id"]) for job in response.json()["jobs"]]


async def _newest_first(ui: InProcessUi, ids: list[UUID]) -> list[UUID]:
    rows = [await ui.backend.get(ident) for ident in ids]
    keys = sorted(((r.created_at, r.id) for r in rows if r is not None), reverse=True)
    return [ident for _, ident in keys]


async def test_next_page_links_walk_every_job_once_newest_first(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        backend = ui.backend
        made = [(await backend.enqueue(args(queue="walk"))).id for _ in range(9)]
        # One statement: these share created_at, and the id breaks the tie.
        made += [job.id for job in await backend.enqueue_batch([args(queue="walk")] * 6)]

        path: str | None = "/jobs?queue=walk&limit=4"
        shown: list[UUID] = []
        pages = 0
        while path is not None:
            response = await ui.client.get(path)
            assert response.status_code == 200
            assert "offset" not in path
            shown += job_ids(response.text)
            pages += 1
            if pages == 1:
                # New jobs arrive while an operator reads: later pages do not shift.
                await backend.enqueue_batch([args(queue="walk")] * 3)
            path = next_link(response.text)
        assert pages == 4
        assert len(shown) == len(set(shown)) == 15
        assert set(shown) == set(made)
        assert shown == await _newest_first(ui, made)

        # The JSON twin pages the same way, by its next_cursor.
        page = (await ui.client.get("/api/jobs", params={"queue": "walk", "limit": 10})).json()
        assert page["count"] == 10 and page["total"] == 18 and page["total_exact"]
        rest = await ui.client.get(
            "/api/jobs", params={"queue": "walk", "limit": 10, "cursor": page["next_cursor"]}
        )
        assert rest.json()["next_cursor"] is None
        ids = [UUID(j["id"]) for j in page["jobs"] + rest.json()["jobs"]]
        assert len(set(ids)) == 18 and set(made) <= set(ids)


async def test_filters_narrow_the_page_and_its_json_alike(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        backend = ui.backend
        failed = await job_in(backend, JobStatus.FAILED, queue="media", actor="resize")
        cancelled = await job_in(backend, JobStatus.CANCELLED, queue="mail", actor="send")
        done = await job_in(backend, JobStatus.SUCCEEDED, queue="media", actor="send")
        old = await job_in(backend, JobStatus.PENDING, queue="mail", actor="resize")
        await set_times(pg, old.id, created_ago=timedelta(hours=3))
        # (A job is created before it finishes: the finished bounds rely on it.)
        await set_times(
            pg, done.id, created_ago=timedelta(minutes=90), finished_ago=timedelta(hours=1)
        )
        batch = uuid4()
        children = [
            (await backend.enqueue(args(queue="bulk", metadata={"batch_id": str(batch)}))).id
            for _ in range(2)
        ]
        await backend.enqueue(args(queue="bulk", metadata={"batch_id": str(uuid4())}))

        cases: list[tuple[str, set[UUID]]] = [
            ("status=failed&status=cancelled", {failed.id, cancelled.id}),
            ("status=failed,succeeded", {failed.id, done.id}),
            ("queue=media", {failed.id, done.id}),
            ("queue=media&queue=mail&actor=resize", {failed.id, old.id}),
            ("actor=send&status=succeeded", {done.id}),
            ("created_until=2h", {old.id}),
            ("created_since=2h&queue=mail", {cancelled.id}),
            ("finished_since=30m", {failed.id, cancelled.id}),
            ("finished_until=30m", {done.id}),
            ("status=pending&finished_since=7d", set()),
            (f"batch={batch}", set(children)),
            (f"batch={batch}&status=succeeded", set()),
        ]
        for query, want in cases:
            shown = await _listed(ui, f"/jobs?{query}")
            assert set(shown) == want, query
            assert len(shown) == len(want), query
            # The JSON's statuses are an enum: repeated, never comma-joined.
            api_query = query.replace("status=failed,succeeded", "status=failed&status=succeeded")
            assert set(await _api_ids(ui, f"/api/jobs?{api_query}")) == want, query

        # The form shows the filter it applied.
        page = (await ui.client.get("/jobs?status=failed&queue=media&created_since=2h")).text
        assert 'value="failed" checked' in page and 'value="crashed">' in page
        assert 'name="queue" value="media"' in page
        assert 'name="created_since" value="2h"' in page


async def test_the_url_is_the_filter_s_own_and_the_live_part_keeps_it(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        failed = await job_in(ui.backend, JobStatus.FAILED, queue="media")
        # A GET form sends every field: the empty ones go, by a redirect to the stable URL.
        form = await ui.client.get(
            "/jobs?status=failed&queue=media&actor=&created_since=&batch=&finished_until="
        )
        assert form.status_code == 302
        assert form.headers["location"] == "/jobs?status=failed&queue=media"

        page = await ui.client.get("/jobs?queue=media&status=failed")
        live_url = "/jobs?status=failed&amp;queue=media&amp;part=live"
        assert f'hx-get="{live_url}"' in page.text
        live = await ui.client.get("/jobs?status=failed&queue=media&part=live", headers=HTMX)
        assert live.status_code == 200
        assert "<form" not in live.text and "<html" not in live.text
        assert job_ids(live.text) == [failed.id]
        row = live.text[live.text.index(f'data-job="{failed.id}"') :]
        assert "ConnectionResetError: upstream closed the connection" in row.split("</tr>")[0]


BAD_FILTERS = [
    ("status=finished", "status:"),
    ("created_since=the+other+day", "created_since: cannot read"),
    ("finished_until=-2h", "finished_until:"),
    ("limit=0", "limit:"),
    ("limit=100000", "limit:"),
    ("cursor=not-a-cursor", "cursor:"),
    ("batch=42", "batch:"),
    ("queue=a%00b", "queue: must not contain a NUL"),
]


async def test_a_filter_it_cannot_read_is_a_400_naming_it(pg: PgTarget) -> None:
    page_only = ("created_since=1h&created_since=2h", "created_since: give it once")
    async with open_ui(pg) as ui:
        for query, reason in [*BAD_FILTERS, page_only]:
            page = await ui.client.get(f"/jobs?{query}")
            assert page.status_code == 400, query
            assert reason in page.text.replace("&#39;", "'"), query
            assert "<form" in page.text  # the form, to fix it
            if (query, reason) != page_only:  # the JSON takes one value of a single one
                api = await ui.client.get(f"/api/jobs?{query}")
                assert api.status_code == 400, (query, api.text)


async def test_a_payload_or_name_holding_markup_renders_as_text(pg: PgTarget) -> None:
    script = "<script>alert(1)</script>"
    async with open_ui(pg) as ui:
        job = await job_in(
            ui.backend,
            JobStatus.FAILED,
            queue=script,
            actor="<img src=x onerror=alert(2)>",
            payload={"html": script},
        )
        for path in ("/jobs", f"/jobs/{job.id}", f"/jobs/{job.id}?part=live"):
            text = (await ui.client.get(path)).text
            assert script not in text and "<img src=x" not in text, path
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text, path
            assert "&lt;img src=x onerror=alert(2)&gt;" in text, path
        document = (await ui.client.get(f"/api/jobs/{job.id}")).json()
        assert document["job"]["payload"] == {"html": script}
        assert document["job"]["queue"] == script
