"""A stale worker's alert acknowledged from the workers page (a CSRF-checked POST like the
other actions, refused in read-only mode) and from ``/api/workers/{id}/ack``; recorded with
the operator; the overview's alert goes. In-process app over the test's own schema."""

from __future__ import annotations

from uuid import UUID

import pytest

from taskq_cli.ui.config import UiConfig
from tests.conftest import PgTarget
from tests.ui.fleet_client import HTMX, SAME_ORIGIN, FleetUi
from tests.ui.fleet_client import open_fleet_ui as open_ui
from tests.ui.test_pages_fleet import _silence, _worker

pytestmark = [pytest.mark.postgres]


def _row(page: str, worker: UUID) -> str:
    return page.split(f'data-worker="{worker}"')[1].split("</tr>")[0]


async def _stale_alerts(ui: FleetUi) -> set[str]:
    overview = (await ui.client.get("/api/overview")).json()
    return {a["subject"] for a in overview["alerts"] if a["kind"] == "stale_worker"}


async def test_the_workers_page_button_acknowledges_a_stale_worker(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        backend = ui.backend
        live = await _worker(backend, ["media"], label="media-1", leader=True)
        silent = await _worker(backend, ["reports"], label="reports-1")
        await _silence(pg, silent)
        page = (await ui.client.get("/workers?part=live")).text
        assert f'action="/workers/{silent}/ack"' in _row(page, silent)
        assert "/ack" not in _row(page, live)  # a live worker has nothing to acknowledge
        assert await _stale_alerts(ui) == {"reports-1 (node-a:4100)"}

        # A cross-site POST is refused like every action's, and writes nothing.
        forged = await ui.client.post(
            f"/workers/{silent}/ack",
            headers={"sec-fetch-site": "cross-site", "origin": "https://evil.example"},
        )
        assert forged.status_code == 403
        assert await backend.list_operator_log(action="worker_ack") == []

        done = await ui.client.post(f"/workers/{silent}/ack", headers={**SAME_ORIGIN, **HTMX})
        assert done.status_code == 200
        row = _row(done.text, silent)
        assert "acknowledged by " in row and "(web UI)" in row and "/ack" not in row
        [entry] = await backend.list_operator_log(action="worker_ack")
        assert entry.target == str(silent) and (entry.by or "").endswith("(web UI)")
        assert await _stale_alerts(ui) == set()
        listed = (await ui.client.get("/api/workers")).json()["workers"]
        shown = next(w for w in listed if w["id"] == str(silent))
        assert (shown["state"], shown["acknowledged"]) == ("stale", True)

        # Without htmx, the browser is sent back to the page.
        again = await ui.client.post(f"/workers/{silent}/ack", headers=SAME_ORIGIN)
        assert again.status_code == 303 and again.headers["location"] == "/workers"


async def test_the_api_acknowledges_refuses_a_live_worker_and_an_unknown_one(
    pg: PgTarget,
) -> None:
    async with open_ui(pg) as ui:
        live = await _worker(ui.backend, ["media"], label="media-1")
        silent = await _worker(ui.backend, ["reports"], label="reports-1")
        await _silence(pg, silent)
        done = await ui.client.post(f"/api/workers/{silent}/ack")
        assert done.status_code == 200, done.text
        body = done.json()
        assert body["outcome"] == "acknowledged" and body["worker"]["acknowledged"] is True
        again = await ui.client.post(f"/api/workers/{silent}/ack")
        assert again.json()["outcome"] == "already_acknowledged"
        running = await ui.client.post(f"/api/workers/{live}/ack")
        assert running.status_code == 409 and "is running" in running.text
        unknown = await ui.client.post("/api/workers/00000000-0000-4000-8000-000000000000/ack")
        assert unknown.status_code == 404


async def test_read_only_hides_the_button_and_refuses_the_action(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(read_only=True)) as ui:
        silent = await _worker(ui.backend, ["reports"], label="reports-1")
        await _silence(pg, silent)
        page = (await ui.client.get("/workers")).text
        assert "/ack" not in page
        for path in (f"/workers/{silent}/ack", f"/api/workers/{silent}/ack"):
            refused = await ui.client.post(path, headers=SAME_ORIGIN)
            assert refused.status_code == 403 and "read-only" in refused.text
        assert await ui.backend.list_operator_log(action="worker_ack") == []
