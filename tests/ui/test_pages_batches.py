"""The batches pages show what the database holds: batches with their children's progress
(active and ended), one batch with its children by status (each count a link to those
jobs), its finalizer and its latest failures, the jobs page narrowed to a batch; a plain
tagged batch by its id; unknown and malformed ids; the JSON twins."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest

from tests.batch_seed import make_batch, settle_child
from tests.conformance.states import args
from tests.conftest import PgTarget
from tests.ui.inprocess import open_ui
from tests.ui.job_pages import HTMX, job_ids

pytestmark = [pytest.mark.postgres]


def _row(html: str, batch_id: UUID) -> str:
    start = html.index(f'<tr data-batch="{batch_id}"')
    return html[start : html.index("</tr>", start)]


async def test_the_list_shows_each_batch_s_progress(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        backend = ui.backend
        running = await make_batch(backend, queue="images", size=4, threshold=3)
        await settle_child(backend, running, "succeeded")
        await settle_child(backend, running, "failed")
        ended = await make_batch(backend, queue="mail", size=1, finalizer=None, threshold=1)
        await settle_child(backend, ended, "failed")  # aborts it at its first failure

        html = (await ui.client.get("/batches")).text
        row = _row(html, running.id)
        assert "status-active" in row and "2/4" in row and "1/3" in row  # done, failures
        assert f'href="/jobs?batch={running.id}"' in row and "notify_done" in row
        assert "status-aborted" in _row(html, ended.id)

        active = (await ui.client.get("/batches?status=active&part=live", headers=HTMX)).text
        assert str(running.id) in active and str(ended.id) not in active
        ended_only = await ui.client.get("/api/batches", params={"status": "ended"})
        assert [b["id"] for b in ended_only.json()["batches"]] == [str(ended.id)]
        listed = (await ui.client.get("/api/batches", params={"queue": "images"})).json()
        (batch,) = listed["batches"]
        assert (batch["done"], batch["total"], batch["failed"]) == (2, 4, 1)
        assert batch["by_status"] == {"pending": 2, "succeeded": 1, "failed": 1}
        assert listed["more"] is False

        one = (await ui.client.get("/api/batches", params={"limit": 1})).json()
        assert one["count"] == 1 and one["more"] is True
        form = await ui.client.get("/batches?status=active&queue=")
        assert (form.status_code, form.headers["location"]) == (302, "/batches?status=active")
        assert (await ui.client.get("/batches?status=sometimes")).status_code == 400
        assert (await ui.client.get("/api/batches?limit=0")).status_code == 400


async def test_a_batch_s_page_links_its_children_and_names_its_failures(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        backend = ui.backend
        batch = await make_batch(backend, queue="images", size=3, metadata={"tenant": "<i>7</i>"})
        failed, _ = await settle_child(backend, batch, "failed", error="503 <b>again</b>")
        await backend.enqueue(args(queue="images"))  # not a child

        html = (await ui.client.get(f"/batches/{batch.id}")).text
        assert "status-active" in html and "1 of 3 done (1 failed)" in html
        assert f'href="/jobs?status=failed&amp;batch={batch.id}"' in html
        assert f'href="/jobs?status=pending&amp;batch={batch.id}"' in html
        failures = html[html.index('id="failures"') :]
        assert job_ids(failures) == [failed.id]
        assert "503 &lt;b&gt;again&lt;/b&gt;" in failures
        assert "&lt;i&gt;7&lt;/i&gt;" in html and "<i>7</i>" not in html

        # The jobs page narrowed to the batch lists its children and nothing else.
        children = {job.id for job in batch.children}
        listed = (await ui.client.get(f"/jobs?batch={batch.id}")).text
        assert set(job_ids(listed)) == children
        failed_only = (await ui.client.get(f"/jobs?batch={batch.id}&status=failed")).text
        assert job_ids(failed_only) == [failed.id]

        # The job's page names its batch and links back.
        job_page = (await ui.client.get(f"/jobs/{failed.id}")).text
        assert f'href="/batches/{batch.id}"' in job_page

        document = (await ui.client.get(f"/api/batches/{batch.id}")).json()
        assert document["batch"]["status"] == "active"
        assert document["batch"]["finalizer_actor"] == "notify_done"
        assert [job["id"] for job in document["failures"]] == [str(failed.id)]
        assert document["metadata"] == {"tenant": "<i>7</i>"}


async def test_a_tagged_batch_unknown_and_malformed_ids(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        tagged = uuid4()
        for _ in range(2):
            await ui.backend.enqueue(args(queue="tags", metadata={"batch_id": str(tagged)}))
        html = (await ui.client.get(f"/batches/{tagged}")).text
        assert "untracked" in html and "0 of 2 done" in html
        assert (await ui.client.get("/api/batches")).json()["batches"] == []  # no row: not listed

        unknown = await ui.client.get(f"/batches/{uuid4()}")
        assert unknown.status_code == 404 and "No such batch" in unknown.text
        malformed = await ui.client.get("/batches/yesterday")
        assert malformed.status_code == 400 and "Not a batch id" in malformed.text
        live = await ui.client.get(f"/batches/{uuid4()}?part=live", headers=HTMX)
        assert live.status_code == 404 and live.headers["content-type"].startswith("text/plain")
        assert (await ui.client.get(f"/api/batches/{uuid4()}")).status_code == 404
        assert (await ui.client.get("/api/batches/yesterday")).status_code == 400
