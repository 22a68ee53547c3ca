"""Times in a real browser at 1280 px: a table says how long ago, on one line, with the
exact instant the database holds in the tooltip; a job's page keeps absolute times with
the same tooltip; the JSON API keeps ISO values."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from playwright.async_api import Locator, Page, expect

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.statemachine import JobStatus
from tests.ui.job_pages import set_times
from tests.ui.server import UiServer
from tests.ui.states import job_in

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.slow]

# A detail page's tooltip: the full ISO value, then how long ago.
ISO_AND_AGO = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+\+00:00 \((now|\d+ (s|min|h|d) ago)\)$")


async def _line_boxes(element: Locator) -> int:
    """How many lines the element's text takes (one box per line it wraps onto)."""
    count: int = await element.evaluate("e => e.getClientRects().length")
    return count


async def test_the_jobs_table_shows_relative_times_on_one_line_with_the_iso_value(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    job = await job_in(ui_backend, JobStatus.FAILED, queue="media")
    # A little past whole units, so the figure shown does not depend on how long the
    # test takes.
    await set_times(
        ui_server.target,
        job.id,
        created_ago=timedelta(hours=3, minutes=30),
        finished_ago=timedelta(minutes=5, seconds=30),
    )
    row = await ui_backend.get(job.id)
    assert row is not None and row.finished_at is not None

    await page.goto(ui_server.url + "/jobs?status=failed")
    cells = page.locator(f"tr[data-job='{job.id}'] time")
    await expect(cells).to_have_count(2)
    created, finished = cells.nth(0), cells.nth(1)
    await expect(created).to_have_text("3 h ago")
    await expect(finished).to_have_text("5 min ago")
    # The tooltip and the machine-readable value are the database's instant, in full.
    for cell, value in ((created, row.created_at), (finished, row.finished_at)):
        await expect(cell).to_have_attribute("title", value.isoformat())
        assert datetime.fromisoformat(await cell.get_attribute("datetime") or "") == value
        assert await _line_boxes(cell) == 1

    # The job's page keeps the absolute time, on one line, with the same tooltip.
    await page.goto(f"{ui_server.url}/jobs/{job.id}")
    created_at = page.locator("#fields dd time").first
    await expect(created_at).to_have_text(row.created_at.isoformat(timespec="seconds"))
    await expect(created_at).to_have_attribute("title", f"{row.created_at.isoformat()} (3 h ago)")
    assert await _line_boxes(created_at) == 1
    event_time = page.locator("#events tbody tr time").first
    await expect(event_time).to_have_attribute("title", ISO_AND_AGO)


async def test_the_api_keeps_iso_times(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    job = await job_in(ui_backend, JobStatus.SUCCEEDED, queue="media")
    row = await ui_backend.get(job.id)
    assert row is not None
    document = await page.request.get(f"{ui_server.url}/api/jobs/{job.id}")
    body = await document.json()
    assert datetime.fromisoformat(body["job"]["created_at"]) == row.created_at
    assert datetime.fromisoformat(body["job"]["finished_at"]) == row.finished_at
