"""A workflow in a real browser: the list leads to its page, whose graph shows every step
with its status and follows the steps as they end, and a step's box opens its job, which
names the workflow and what it waits for."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from taskq_core.backend.postgres.backend import PostgresBackend
from tests.ui.server import UiServer
from tests.workflow_seed import end_step, make_workflow, run_step, start_step

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.slow]

DIAMOND = [("extract", ()), ("t1", ("extract",)), ("t2", ("extract",)), ("load", ("t1", "t2"))]


async def test_a_workflow_s_graph_shows_each_step_with_its_status(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    wf = await make_workflow(ui_backend, DIAMOND)
    await run_step(ui_backend, wf, "extract")
    t1 = await start_step(ui_backend, wf, "t1")

    await page.goto(ui_server.url + "/workflows")
    await page.get_by_role("link", name="nightly-etl").click()
    await expect(page).to_have_url(f"{ui_server.url}/workflows/{wf.id}")
    graph = page.locator("svg.workflow-graph")
    expected = {"extract": "succeeded", "t1": "running", "t2": "pending", "load": "waiting"}
    for step, status in expected.items():
        node = graph.locator(f"[data-step='{step}']")
        await expect(node).to_be_visible()
        await expect(node).to_contain_text(step)
        await expect(node).to_contain_text(status)
    await expect(graph.locator("path.wf-edge")).to_have_count(4)

    # The graph follows the steps in place as they end.
    await end_step(ui_backend, t1, "failed")
    await expect(graph.locator("[data-step='t1']")).to_contain_text("failed")
    await expect(graph.locator("[data-step='load']")).to_contain_text("cancelled")

    await graph.locator("[data-step='t2']").click()
    await expect(page).to_have_url(f"{ui_server.url}/jobs/{wf.jobs['t2']}")
    await expect(page.locator("#workflow")).to_contain_text("nightly-etl")
    await expect(page.locator("#workflow")).to_contain_text("t2")
