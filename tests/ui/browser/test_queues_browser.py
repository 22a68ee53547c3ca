"""Queues in a real browser: pausing asks why and records it, resuming acts in place; a
read-only server shows no action anywhere and refuses one posted anyway."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Page, expect

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.statemachine import JobStatus
from tests.ui.browser.pages import keep_marker, marker_kept
from tests.ui.server import UiServer
from tests.ui.states import job_in

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.slow]


async def test_pause_with_a_reason_then_resume_in_place(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    for _ in range(3):
        await job_in(ui_backend, JobStatus.PENDING, queue="emails")
    await job_in(ui_backend, JobStatus.PENDING, queue="media")
    await page.goto(ui_server.url + "/queues")
    emails = page.locator("tr[data-queue='emails']")
    await expect(emails).to_contain_text("active")

    await emails.get_by_role("link", name="Pause").click()
    await expect(page).to_have_url(f"{ui_server.url}/queues/emails/pause")
    await page.locator("#reason").fill("smtp relay down")
    await page.get_by_role("button", name="Pause").click()
    await expect(page).to_have_url(re.compile(r"/queues$"))
    await expect(emails).to_contain_text("paused")
    await expect(emails).to_contain_text("smtp relay down")
    queue = await ui_backend.get_queue("emails")
    assert queue is not None and queue.paused
    assert queue.pause is not None and queue.pause.reason == "smtp relay down"
    assert (queue.pause.paused_by or "").endswith("(web UI)")
    media = await ui_backend.get_queue("media")
    assert media is not None and not media.paused

    await keep_marker(page)
    await emails.get_by_role("button", name="Resume").click()
    await expect(emails).to_contain_text("active")
    assert await marker_kept(page), "resume reloaded the page instead of updating it"
    queue = await ui_backend.get_queue("emails")
    assert queue is not None and not queue.paused


@pytest.mark.ui_server(read_only=True)
async def test_a_read_only_server_offers_no_action_and_refuses_one(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    server = ui_server
    failed = await job_in(ui_backend, JobStatus.FAILED, queue="media")
    waiting = await job_in(ui_backend, JobStatus.PENDING, queue="emails")

    await page.goto(server.url + "/queues")
    await expect(page.locator("tr[data-queue='emails']")).to_be_visible()
    await expect(page.locator(".badge")).to_have_text("read-only")
    await expect(page.locator("main").get_by_role("button")).to_have_count(0)
    await expect(page.get_by_role("link", name="Pause")).to_have_count(0)
    for job in (failed, waiting):
        await page.goto(f"{server.url}/jobs/{job.id}")
        await expect(page.locator("#payload")).to_be_visible()
        await expect(page.locator("main").get_by_role("button")).to_have_count(0)

    # A form posted anyway, from the page itself (same origin), is refused.
    status = await page.evaluate(
        """async (path) => (await fetch(path, {method: "POST"})).status""",
        f"/jobs/{waiting.id}/cancel",
    )
    assert status == 403
    row = await ui_backend.get(waiting.id)
    assert row is not None and row.status is JobStatus.PENDING
