"""Batches in a real browser: the list shows an active batch's progress, its page counts
the children by status and links to them in the jobs list; a batch's id pasted into a job's
URL opens the batch."""

from __future__ import annotations

from uuid import uuid4

import pytest
from playwright.async_api import Page, expect

from taskq_core.backend.postgres.backend import PostgresBackend
from tests.batch_seed import make_batch, settle_child
from tests.ui.server import UiServer

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.slow]


async def test_a_batch_shows_its_progress_and_leads_to_its_children(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    batch = await make_batch(ui_backend, queue="media", size=4, finalizer="publish_album")
    await settle_child(ui_backend, batch, "succeeded")
    await settle_child(ui_backend, batch, "failed")

    await page.goto(ui_server.url + "/batches")
    row = page.locator(f"tr[data-batch='{batch.id}']")
    await expect(row).to_contain_text("active")
    await expect(row.locator("td.num").first).to_have_text("2/4")
    await expect(row).to_contain_text("publish_album")

    await row.get_by_role("link", name=str(batch.id)).click()
    await expect(page).to_have_url(f"{ui_server.url}/batches/{batch.id}")
    children = page.locator("#children tbody tr")
    await expect(children).to_have_count(3)  # pending, succeeded, failed
    await expect(page.locator("#failures tbody tr")).to_have_count(1)

    # Progress moves on in place as children finish.
    await settle_child(ui_backend, batch, "succeeded")
    await expect(page.locator("#live")).to_contain_text("3 of 4 done")

    await page.get_by_role("link", name="its jobs").first.click()
    await expect(page.locator("table.jobs tbody tr")).to_have_count(4)


async def test_a_batch_id_pasted_into_the_job_url_opens_the_batch(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    batch = await make_batch(ui_backend, queue="media", size=2, finalizer=None)
    assert await ui_backend.get(batch.id) is None  # no job has the batch's id

    await page.goto(f"{ui_server.url}/jobs/{batch.id}")
    await expect(page).to_have_url(f"{ui_server.url}/batches/{batch.id}")
    await expect(page.locator("h1")).to_contain_text(str(batch.id))
    await expect(page.locator("#live")).to_contain_text("0 of 2 done")

    # An id that is neither a job's nor a batch's still says so.
    unknown = uuid4()
    answer = await page.goto(f"{ui_server.url}/jobs/{unknown}")
    assert answer is not None and answer.status == 404
    await expect(page).to_have_url(f"{ui_server.url}/jobs/{unknown}")
    await expect(page.locator("main")).to_contain_text(f"no job with id {unknown}")
