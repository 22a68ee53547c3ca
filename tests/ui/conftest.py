"""UI fixtures: a real ``taskq ui serve`` process over the test's freshly migrated schema
(plain, with a token, read-only), and a backend on the same schema to put jobs in known
states (tests/ui/states.py).

The server fixtures are synchronous (a subprocess), so any test may use them whatever event
loop it runs on; the browser tests (tests/ui/browser/) run on the session's loop and
override ``ui_backend`` to open it there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from tests.conftest import PgTarget
from tests.ui.server import UiServer

pytestmark = [pytest.mark.postgres]

# What the token variants are started with (TASKQ_ADMIN_TOKEN).
TOKEN = "ui-test-token-5d1f0c"

StartUi = Callable[..., UiServer]


@pytest.fixture
def start_ui(pg: PgTarget) -> Iterator[StartUi]:
    """``start_ui(token=None, read_only=False, **env)``: another server over the test's
    schema; every one is stopped at the end."""
    servers: list[UiServer] = []

    def start(**options: Any) -> UiServer:
        server = UiServer.start(pg, **options)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def ui_server(start_ui: StartUi) -> UiServer:
    """A server with no token and every action enabled."""
    return start_ui()


@pytest.fixture
def ui_server_token(start_ui: StartUi) -> UiServer:
    """A server whose every request must carry ``TOKEN``."""
    return start_ui(token=TOKEN)


@pytest.fixture
def ui_server_read_only(start_ui: StartUi) -> UiServer:
    """A server started with ``--read-only``: no retry, cancel, pause or resume."""
    return start_ui(read_only=True)


@pytest.fixture
async def ui_backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    """A backend on the test's schema, to seed jobs and check what actions changed."""
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=3)
    yield backend
    await backend.close()
