"""Schedules in a real browser: disable asks why, enable acts in place, run-now asks for a
confirmation and makes one job, each recorded with the web UI's operator (the operator log,
or the job's metadata); a read-only server offers none of them and refuses them."""

from __future__ import annotations

import re
from uuid import UUID

import pytest
from playwright.async_api import Page, expect

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import JobFilter
from taskq_core.client import JobsClient
from tests.ui.browser.conftest import PageWatch
from tests.ui.browser.pages import keep_marker, marker_kept
from tests.ui.server import UiServer

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.slow]


async def _schedules(backend: PostgresBackend) -> None:
    """``nightly`` (enabled) and ``hourly`` (disabled), made as an application would."""
    client = JobsClient(backend=backend)
    await client.open()
    await client.create_schedule("nightly", "build_report", "0 3 * * *", payload={"full": True})
    await client.create_schedule("hourly", "ping", "0 * * * *")
    await client.update_schedule("hourly", enabled=False)


async def test_disable_asks_why_and_enable_acts_in_place_both_logged(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    await _schedules(ui_backend)
    await page.goto(ui_server.url + "/schedules")
    nightly = page.locator("tr[data-schedule='nightly']")
    hourly = page.locator("tr[data-schedule='hourly']")
    await expect(nightly.locator("td").nth(4)).to_have_text("yes")

    await nightly.get_by_role("link", name="Disable").click()
    await expect(page).to_have_url(f"{ui_server.url}/schedules/nightly/disable")
    await page.locator("#reason").fill("month-end freeze")
    await page.get_by_role("button", name="Disable").click()
    await expect(page).to_have_url(re.compile(r"/schedules$"))
    await expect(nightly.locator("td").nth(4)).to_have_text("no")
    await expect(nightly).to_contain_text("none while disabled")
    record = await ui_backend.get_schedule("nightly")
    assert record is not None and not record.enabled
    [entry] = await ui_backend.list_operator_log(action="schedule_update", target="nightly")
    assert entry.reason == "month-end freeze"
    assert (entry.by or "").endswith("(web UI)")
    assert entry.detail["changed"] == {"enabled": [True, False]}

    await keep_marker(page)
    await hourly.get_by_role("button", name="Enable").click()
    await expect(hourly.locator("td").nth(4)).to_have_text("yes")
    await expect(page.locator("#outcome")).to_have_text("hourly enabled")
    assert await marker_kept(page), "enable reloaded the page instead of updating it"
    record = await ui_backend.get_schedule("hourly")
    assert record is not None and record.enabled
    [entry] = await ui_backend.list_operator_log(action="schedule_update", target="hourly")
    assert (entry.by or "").endswith("(web UI)") and entry.reason is None
    assert entry.detail["changed"] == {"enabled": [False, True]}


async def test_run_now_asks_then_makes_one_job_that_names_the_operator(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend, watch: PageWatch
) -> None:
    await _schedules(ui_backend)
    await page.goto(ui_server.url + "/schedules")
    hourly = page.locator("tr[data-schedule='hourly']")
    await keep_marker(page)

    await hourly.get_by_role("button", name="Run now").click()
    outcome = page.locator("#outcome")
    await expect(outcome).to_contain_text("hourly ran now: job")
    assert [kind for kind, _ in watch.dialogs] == ["confirm"]
    assert "Run schedule hourly now?" in watch.dialogs[0][1]
    assert await marker_kept(page)

    [job] = await ui_backend.list_jobs(JobFilter())
    assert job.actor == "ping"
    assert job.metadata["schedule"] == "hourly" and job.metadata["manual"] is True
    assert job.metadata["by"].endswith("(web UI)")
    record = await ui_backend.get_schedule("hourly")
    assert record is not None and not record.enabled  # running it once enables nothing

    await outcome.get_by_role("link").click()
    await expect(page).to_have_url(f"{ui_server.url}/jobs/{job.id}")
    await expect(page.locator("#metadata")).to_contain_text("(web UI)")
    assert UUID(await page.locator("h1 code").inner_text()) == job.id


@pytest.mark.ui_server(read_only=True)
async def test_a_read_only_server_offers_no_schedule_action_and_refuses_one(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    await _schedules(ui_backend)
    await page.goto(ui_server.url + "/schedules")
    await expect(page.locator("tr[data-schedule='nightly']")).to_be_visible()
    await expect(page.locator("main").get_by_role("button")).to_have_count(0)
    await expect(page.get_by_role("link", name="Disable")).to_have_count(0)

    for path in ("/schedules/hourly/enable", "/schedules/nightly/disable", "/schedules/hourly/run"):
        status = await page.evaluate(
            """async (path) => (await fetch(path, {method: "POST"})).status""", path
        )
        assert status == 403, path
    form = await page.goto(ui_server.url + "/schedules/nightly/disable")
    assert form is not None and form.status == 403
    assert await ui_backend.list_jobs(JobFilter()) == []
    nightly = await ui_backend.get_schedule("nightly")
    hourly = await ui_backend.get_schedule("hourly")
    assert nightly is not None and nightly.enabled
    assert hourly is not None and not hourly.enabled
