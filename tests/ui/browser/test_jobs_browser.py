"""The jobs pages in a real browser over a real server and database: the filter form, a
job's page, retry and cancel (each asks why on its own page; the database records the reason
and the operator in the job's events), and a payload that carries markup rendering as
text."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.async_api import Locator, Page, expect

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EventRow
from taskq_core.statemachine import JobStatus
from tests.ui.browser.conftest import PageWatch
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


def operator_events(events: list[EventRow]) -> list[dict[str, Any]]:
    """The detail of each job event an operator's write stamped (``by``)."""
    return [event.detail for event in events if "by" in event.detail]


async def test_retry_asks_why_and_records_it_with_the_operator(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    job = await job_in(ui_backend, JobStatus.FAILED, queue="media")
    await page.goto(f"{ui_server.url}/jobs/{job.id}")
    await expect(page.locator("#live .status").first).to_have_text("failed")

    await page.get_by_role("link", name="Retry").click()
    await expect(page).to_have_url(f"{ui_server.url}/jobs/{job.id}/retry")
    await expect(page.locator("main")).to_contain_text("fresh attempt budget")
    await page.locator("#reason").fill("upstream fixed in 4.2.1")
    await page.get_by_role("button", name="Retry job").click()

    await expect(page).to_have_url(re.compile(rf"/jobs/{job.id}\?outcome=retried$"))
    await expect(page.locator("#outcome")).to_contain_text("retried")
    await expect(page.locator("#live .status").first).to_have_text("pending")
    row = await ui_backend.get(job.id)
    assert row is not None and row.status is JobStatus.PENDING
    stamped = operator_events(await ui_backend.get_events(job.id))
    assert [detail.get("why") for detail in stamped] == ["upstream fixed in 4.2.1"]
    assert stamped[0]["by"].endswith("(web UI)")
    # The page shows who and why among the events.
    await expect(page.locator("#events")).to_contain_text("upstream fixed in 4.2.1")
    # A pending job offers cancel now, not retry.
    await expect(page.get_by_role("link", name="Retry")).to_have_count(0)
    await expect(page.get_by_role("link", name="Cancel")).to_be_visible()


async def test_cancel_asks_why_and_records_it_as_the_reason_with_the_operator(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend, watch: PageWatch
) -> None:
    job = await job_in(ui_backend, JobStatus.PENDING, queue="emails")
    await page.goto(f"{ui_server.url}/jobs/{job.id}")

    await page.get_by_role("link", name="Cancel").click()
    await expect(page).to_have_url(f"{ui_server.url}/jobs/{job.id}/cancel")
    await expect(page.locator("main")).to_contain_text("cancelled at once")
    await page.locator("#reason").fill("duplicate of a newer send")
    await page.get_by_role("button", name="Cancel job").click()

    await expect(page).to_have_url(re.compile(rf"/jobs/{job.id}\?outcome=cancelled$"))
    await expect(page.locator("#live .status").first).to_have_text("cancelled")
    await expect(page.locator("#outcome")).to_contain_text("cancelled")
    await expect(page.locator("#fields")).to_contain_text("duplicate of a newer send")
    assert watch.dialogs == []  # the page asked; no browser dialog
    row = await ui_backend.get(job.id)
    assert row is not None and row.status is JobStatus.CANCELLED
    assert row.cancel_reason == "duplicate of a newer send"
    stamped = operator_events(await ui_backend.get_events(job.id))
    assert [detail.get("why") for detail in stamped] == ["duplicate of a newer send"]
    assert stamped[0]["by"].endswith("(web UI)")


async def test_cancel_without_a_reason_still_names_the_web_ui_and_the_operator(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    job = await job_in(ui_backend, JobStatus.PENDING, queue="emails")
    await page.goto(f"{ui_server.url}/jobs/{job.id}/cancel")
    await page.get_by_role("button", name="Cancel job").click()
    await expect(page.locator("#live .status").first).to_have_text("cancelled")
    row = await ui_backend.get(job.id)
    assert row is not None and row.cancel_reason == "cancelled from the web UI"
    stamped = operator_events(await ui_backend.get_events(job.id))
    assert len(stamped) == 1 and "why" not in stamped[0]
    assert stamped[0]["by"].endswith("(web UI)")


async def test_an_action_page_for_a_job_that_moved_on_offers_nothing(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    done = await job_in(ui_backend, JobStatus.SUCCEEDED, queue="media")
    await page.goto(f"{ui_server.url}/jobs/{done.id}/cancel")
    await expect(page.locator("main")).to_contain_text("Nothing to cancel: the job is succeeded")
    await expect(page.locator("main").get_by_role("button")).to_have_count(0)


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
