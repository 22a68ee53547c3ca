"""Batches in a real browser: the list shows an active batch's progress, its page counts
the children by status and links to them in the jobs list."""

from __future__ import annotations

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
