"""Fixtures the security tests borrow: the admin UI's real servers (tests/ui/conftest.py)
and, for the tests where a click matters, the browser (tests/ui/browser/conftest.py; its
``ui_backend`` runs on the session's loop, as the browser tests do)."""

from __future__ import annotations

from tests.ui.browser.conftest import browser, page, ui_backend, watch
from tests.ui.conftest import start_ui, ui_server, ui_spares

__all__ = ["browser", "page", "start_ui", "ui_backend", "ui_server", "ui_spares", "watch"]
