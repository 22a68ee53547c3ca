"""The admin UI app in the test's own process for the security and fleet-page tests: a
PostgresBackend on the test's schema (or reached another way, through a proxy), the app
over it with the config a test gives (token, read-only, public URL), and an httpx client
that calls it through ASGI on the test's event loop (Litestar's own test client runs the
app on another loop, where the asyncpg pool breaks).

The client's base URL is http://127.0.0.1, a host the app answers without a token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from taskq_cli.dashboard.source import BackendSource
from taskq_cli.ui.app import create_app
from taskq_cli.ui.config import UiConfig, dashboard_settings
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.obs.fleet import FleetMetrics, FleetSettings
from tests.conftest import PgTarget

BASE_URL = "http://127.0.0.1"
# What a browser adds to a form POST from one of our own pages.
SAME_ORIGIN = {"sec-fetch-site": "same-origin", "origin": BASE_URL}
# What htmx adds to its requests.
HTMX = {"hx-request": "true"}


@dataclass
class FleetUi:
    """The app's client and the backend it reads (a test writes states through it)."""

    client: httpx.AsyncClient
    backend: PostgresBackend


@asynccontextmanager
async def open_fleet_ui(
    pg: PgTarget,
    config: UiConfig | None = None,
    *,
    dsn: str | None = None,
    metrics: bool = False,
) -> AsyncIterator[FleetUi]:
    """The app over the test's schema (``dsn``: reach the server another way, a proxy;
    ``metrics``: serve the fleet metrics at /metrics, as ``taskq ui serve`` does)."""
    backend = await PostgresBackend.connect(dsn or pg.dsn, pg.schema, max_size=3)
    try:
        source = BackendSource(
            backend, database="test", schema=pg.schema, settings=dashboard_settings()
        )
        fleet = FleetMetrics(backend, FleetSettings()) if metrics else None
        app = create_app(source, config or UiConfig(), metrics=fleet)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            yield FleetUi(client, backend)
    finally:
        await backend.close()
