"""Browser fixtures: Debian's Chromium under Playwright, one browser per session and a fresh
page (its own context: cookies, storage) per test, 1280x800.

Playwright's objects belong to the event loop that started them, so the browser tests run on
the session's loop (``pytestmark = pytest.mark.asyncio(loop_scope="session")`` in each
module) and so does ``ui_backend`` here. Chromium is installed with apt-get on first use
when it is missing and the tests run as root (tests/ui/chromium.py); otherwise the browser
tests are skipped, saying why.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Dialog, Page, async_playwright

from taskq_core.backend.postgres.backend import PostgresBackend
from tests.ui.chromium import ChromiumUnavailable, find_chromium, launch_args
from tests.ui.server import UiServer

VIEWPORT = {"width": 1280, "height": 800}
# How long a page step (a click, a wait for text) may take before the test fails: a live
# part refreshes every 2 s, so this covers a few refreshes on a busy machine.
STEP_TIMEOUT_MS = 10_000


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Browser]:
    """Chromium, started once for the session."""
    try:
        executable = find_chromium(install=True)
    except ChromiumUnavailable as exc:
        pytest.skip(str(exc))
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable, args=launch_args())
        yield launched
        await launched.close()


class PageWatch:
    """What a page opened and threw: every dialog (type, message) and uncaught script
    errors. Confirmations (``hx-confirm``) are accepted; any other dialog is dismissed, and
    an ``alert`` is what an injected script would open."""

    def __init__(self) -> None:
        self.dialogs: list[tuple[str, str]] = []
        self.errors: list[str] = []

    async def on_dialog(self, dialog: Dialog) -> None:
        self.dialogs.append((dialog.type, dialog.message))
        if dialog.type == "confirm":
            await dialog.accept()
        else:
            await dialog.dismiss()

    @property
    def alerts(self) -> list[str]:
        return [message for kind, message in self.dialogs if kind == "alert"]


@pytest_asyncio.fixture(loop_scope="session")
async def watch() -> PageWatch:
    return PageWatch()


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Browser, watch: PageWatch) -> AsyncIterator[Page]:
    """A fresh page of its own context; fails the test if a script on it threw."""
    context = await browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    context.set_default_timeout(STEP_TIMEOUT_MS)
    opened = await context.new_page()
    opened.on("dialog", watch.on_dialog)
    opened.on("pageerror", lambda error: watch.errors.append(str(error)))
    yield opened
    await context.close()
    assert watch.errors == [], f"script errors on the page: {watch.errors}"


@pytest_asyncio.fixture(loop_scope="session")
async def ui_backend(ui_server: UiServer) -> AsyncIterator[PostgresBackend]:
    """A backend on the schema ``ui_server`` serves, on the session's loop (where the
    tests run)."""
    target = ui_server.target
    backend = await PostgresBackend.connect(target.dsn, target.schema, max_size=3)
    yield backend
    await backend.close()
