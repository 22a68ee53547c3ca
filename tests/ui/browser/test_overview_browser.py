"""The overview in a real browser over a real server and database: its totals are the
database's, and its live part follows the database without a full reload."""

from __future__ import annotations

import pytest
from playwright.async_api import Locator, Page, expect

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.statemachine import JobStatus
from tests.ui.browser.pages import keep_marker, marker_kept
from tests.ui.server import UiServer
from tests.ui.states import job_in, status_counts

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.slow]

SEEDED = {
    JobStatus.PENDING: 3,
    JobStatus.SCHEDULED: 2,
    JobStatus.RUNNING: 1,
    JobStatus.SUCCEEDED: 4,
    JobStatus.FAILED: 2,
    JobStatus.CANCELLED: 1,
}


def total(page: Page, status: str) -> Locator:
    """The count shown for ``status`` on the overview."""
    return page.locator(f".total.status-{status} .count")


async def test_the_overview_shows_the_databases_totals(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    for status, count in SEEDED.items():
        for _ in range(count):
            await job_in(ui_backend, status, queue="media")
    counts = await status_counts(ui_server.target)
    assert counts == {status.value: n for status, n in SEEDED.items()}

    await page.goto(ui_server.url + "/")
    await expect(page).to_have_title("Overview · TaskQ")
    for status in JobStatus:
        await expect(total(page, status.value)).to_have_text(str(counts.get(status.value, 0)))


async def test_the_live_part_follows_the_database_without_a_reload(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    await job_in(ui_backend, JobStatus.PENDING)
    await page.goto(ui_server.url + "/")
    await expect(total(page, "pending")).to_have_text("1")
    await keep_marker(page)

    for _ in range(4):
        await job_in(ui_backend, JobStatus.PENDING)
    await job_in(ui_backend, JobStatus.FAILED)
    # htmx fetches the live part every refresh: wait for the new numbers to arrive.
    await expect(total(page, "pending")).to_have_text("5")
    await expect(total(page, "failed")).to_have_text("1")
    assert await marker_kept(page), "the page was reloaded instead of updated in place"
