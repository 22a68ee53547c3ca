"""A server with TASKQ_ADMIN_TOKEN in a real browser: a link opened without a session goes
to the login form and, once the token is given, on to where it pointed; the session is an
HttpOnly cookie that is not the token; signing out ends it."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Page, expect

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.statemachine import JobStatus
from tests.ui.conftest import TOKEN
from tests.ui.server import UiServer
from tests.ui.states import job_in

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.slow]


@pytest.mark.ui_server(token=TOKEN)
async def test_a_link_needs_the_token_then_opens_and_the_session_carries_on(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    server = ui_server
    job = await job_in(ui_backend, JobStatus.FAILED, queue="media")
    link = f"{server.url}/jobs/{job.id}"

    await page.goto(link)
    await expect(page).to_have_url(re.compile(r"/login\?next="))
    await expect(page.locator("h1")).to_have_text("Sign in")

    await page.locator("#token").fill("not-the-token-at-all")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("alert").filter(has_text="token")).to_be_visible()
    await expect(page).to_have_url(re.compile(r"/login"))

    await page.locator("#token").fill(TOKEN)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(link)
    await expect(page.locator("#error")).to_contain_text("ConnectionResetError")

    cookies = await page.context.cookies()
    assert len(cookies) == 1, cookies
    session = cookies[0]
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert TOKEN not in session["value"]
    assert await page.evaluate("document.cookie") == ""  # scripts cannot read it

    # Other pages open with the session, and the live part keeps refreshing with it.
    await page.get_by_role("link", name="Queues").click()
    await expect(page.locator("tr[data-queue='media']")).to_be_visible()
    async with page.expect_response(re.compile(r"/queues\?part=live")) as polled:
        pass
    assert (await polled.value).status == 200

    await page.get_by_role("button", name="Sign out").click()
    await expect(page).to_have_url(re.compile(r"/login"))
    await page.goto(server.url + "/queues")
    await expect(page).to_have_url(re.compile(r"/login\?next="))
