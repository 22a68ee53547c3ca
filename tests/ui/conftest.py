"""UI fixtures: a real ``taskq ui serve`` process over a freshly migrated schema of the
test's own, and a backend on the same schema to put jobs in known states
(tests/ui/states.py).

``ui_server`` is a server with no token and every action on, made ahead while the previous
test ran (tests/ui/spares.py); ``@pytest.mark.ui_server(token=TOKEN)`` or
``(read_only=True)`` asks for a variant. ``ui_backend`` opens on that server's schema.
``start_ui`` starts more servers over the ``pg`` fixture's schema. The server fixtures are
synchronous (subprocesses), so any test may use them whatever event loop it runs on; the
browser tests (tests/ui/browser/) run on the session's loop and override ``ui_backend`` to
open it there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from tests.conftest import PgTarget
from tests.ui.server import UiServer
from tests.ui.spares import SpareServers

# What the token variants are started with (TASKQ_ADMIN_TOKEN).
TOKEN = "ui-test-token-5d1f0c8e2b47a39f6c01d5e8"

StartUi = Callable[..., UiServer]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ui_server(token=None, read_only=False): the options of ui_server's server"
    )


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


@pytest.fixture(scope="session")
def ui_spares(pg_server_dsn: str) -> Iterator[SpareServers]:
    spares = SpareServers(pg_server_dsn)
    yield spares
    spares.close()


@pytest.fixture
def ui_server(ui_spares: SpareServers, request: pytest.FixtureRequest) -> Iterator[UiServer]:
    """A server over a schema of this test's own, with the options of the test's
    ``ui_server`` mark (none: no token, actions on)."""
    marker = request.node.get_closest_marker("ui_server")
    server = ui_spares.take(**(marker.kwargs if marker else {}))
    yield server
    ui_spares.release(server)


@pytest.fixture
async def ui_backend(ui_server: UiServer) -> AsyncIterator[PostgresBackend]:
    """A backend on the schema ``ui_server`` serves, to seed jobs and check what actions
    changed."""
    target = ui_server.target
    backend = await PostgresBackend.connect(target.dsn, target.schema, max_size=3)
    yield backend
    await backend.close()
