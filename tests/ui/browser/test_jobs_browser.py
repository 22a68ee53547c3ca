"""The jobs pages in a real browser over a real server and database: the filter form, a
job's page, retry and cancel (the database changes and the page shows it in place), and a
payload that carries markup rendering as text."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Locator, Page, expect

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.statemachine import JobStatus
from tests.ui.browser.conftest import PageWatch
from tests.ui.browser.pages import keep_marker, marker_kept
from tests.ui.server import UiServer
from tests.ui.states import job_in

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.slow]


def rows(page: Page) -> Locator:
    return page.locator("table.jobs tbody tr")


async def test_the_filter_form_narrows_the_list_and_keeps_it_in_the_url(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    failed = [await job_in(ui_backend, JobStatus.FAILED, queue="media") for _ in range(2)]
    waiting = [
        await job_in(ui_backend, JobStatus.PENDING, queue="emails", actor="send_email")
        for _ in range(3)
    ]
    await job_in(ui_backend, JobStatus.PENDING, queue="media")
    await job_in(ui_backend, JobStatus.SUCCEEDED, queue="emails", actor="send_email")

    await page.goto(ui_server.url + "/jobs?status=failed")
    await expect(rows(page)).to_have_count(2)
    shown = await rows(page).evaluate_all("rows => rows.map(r => r.dataset.job)")
    assert sorted(shown) == sorted(str(job.id) for job in failed)

    # Pending jobs of one queue, through the form as an operator fills it in.
    for box in await page.locator("fieldset.statuses input[type=checkbox]").all():
        await box.set_checked(await box.get_attribute("value") == "pending")
    await page.locator("input[name=queue]").fill("emails")
    await page.get_by_role("button", name="Filter").click()
    await expect(page).to_have_url(re.compile(r"/jobs\?.*status=pending.*queue=emails"))
    await expect(rows(page)).to_have_count(3)
    shown = await rows(page).evaluate_all("rows => rows.map(r => r.dataset.job)")
    assert sorted(shown) == sorted(str(job.id) for job in waiting)
    # The URL is the view: opened afresh, it shows the same rows.
    await page.goto(page.url)
    await expect(rows(page)).to_have_count(3)


async def test_a_jobs_page_shows_its_payload_error_attempts_events_and_explanation(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    job = await job_in(
        ui_backend, JobStatus.FAILED, queue="media", payload={"url": "s3://img/broken.png"}
    )
    await page.goto(ui_server.url + "/jobs?status=failed")
    await page.locator(f"tr[data-job='{job.id}'] a[href='/jobs/{job.id}']").click()
    await expect(page).to_have_url(f"{ui_server.url}/jobs/{job.id}")
    await expect(page.locator("h1")).to_contain_text(str(job.id))
    await expect(page.locator("#payload")).to_contain_text("s3://img/broken.png")
    await expect(page.locator("#error")).to_contain_text("ConnectionResetError")
    await expect(page.locator("#error .traceback")).to_contain_text("in resize")
    await expect(page.locator("#attempts h2")).to_have_text("Attempts (1)")
    await expect(page.locator("#events tbody tr").first).to_be_visible()
    await expect(page.locator("#explain")).to_be_visible()


async def test_retry_on_a_failed_job_re_pends_it_and_the_page_shows_it_in_place(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    job = await job_in(ui_backend, JobStatus.FAILED, queue="media")
    await page.goto(f"{ui_server.url}/jobs/{job.id}")
    await expect(page.locator("#live .status").first).to_have_text("failed")
    await keep_marker(page)

    await page.get_by_role("button", name="Retry").click()
    await expect(page.locator("#outcome")).to_contain_text("retried")
    await expect(page.locator("#live .status").first).to_have_text("pending")
    assert await marker_kept(page), "the action reloaded the page instead of updating it"
    row = await ui_backend.get(job.id)
    assert row is not None and row.status is JobStatus.PENDING
    # A pending job offers cancel now, not retry.
    await expect(page.get_by_role("button", name="Retry")).to_have_count(0)
    await expect(page.get_by_role("button", name="Cancel")).to_be_visible()


async def test_cancel_on_a_pending_job_asks_then_cancels_it_in_place(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend, watch: PageWatch
) -> None:
    job = await job_in(ui_backend, JobStatus.PENDING, queue="emails")
    await page.goto(f"{ui_server.url}/jobs/{job.id}")
    await keep_marker(page)

    await page.get_by_role("button", name="Cancel").click()
    await expect(page.locator("#live .status").first).to_have_text("cancelled")
    assert [kind for kind, _ in watch.dialogs] == ["confirm"]
    assert str(job.id) in watch.dialogs[0][1]
    await expect(page.locator("#outcome")).to_contain_text("cancelled")
    assert await marker_kept(page)
    row = await ui_backend.get(job.id)
    assert row is not None and row.status is JobStatus.CANCELLED
    assert row.cancel_reason == "cancelled from the web UI"


SCRIPT = "<script>alert('payload')</script>"
IMAGE = "<img src=x onerror=\"alert('error')\">"


async def test_markup_from_the_database_renders_as_text_and_never_runs(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend, watch: PageWatch
) -> None:
    job = await job_in(
        ui_backend,
        JobStatus.FAILED,
        queue="media",
        actor=f"resize{IMAGE}",
        payload={"note": SCRIPT},
    )
    await page.goto(f"{ui_server.url}/jobs/{job.id}")
    await expect(page.locator("#payload")).to_contain_text(SCRIPT)
    await expect(page.locator("#live")).to_contain_text(IMAGE)
    await page.goto(ui_server.url + "/jobs?status=failed")
    await expect(page.locator(f"tr[data-job='{job.id}']")).to_contain_text(IMAGE)
    # Shown as text: no element was made of it, so nothing could run.
    assert await page.locator("main script, main img").count() == 0
    await page.goto(f"{ui_server.url}/jobs/{job.id}")
    assert await page.locator("main script, main img").count() == 0
    assert watch.alerts == []
