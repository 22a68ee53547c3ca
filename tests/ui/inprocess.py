"""The admin UI app in this process, on the test's event loop, over the test's schema.

Litestar's own test client runs the app on another loop (the asyncpg pool would break):
``httpx.ASGITransport`` runs it on the test's. Requests go to ``http://127.0.0.1`` (a name
the security middleware answers without a token). ``SAME_ORIGIN`` is what a browser sends
with a POST from one of our own pages.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from litestar import Litestar

from taskq_cli.dashboard.source import BackendSource
from taskq_cli.ui.app import create_app
from taskq_cli.ui.config import UiConfig, dashboard_settings
from taskq_core.backend.postgres.backend import PostgresBackend
from tests.conftest import PgTarget

BASE_URL = "http://127.0.0.1"
# A POST made by one of our pages: the fetch metadata and origin a browser adds.
SAME_ORIGIN = {"sec-fetch-site": "same-origin", "origin": BASE_URL}


@dataclass
class InProcessUi:
    """The app, a client of it, and the backend and read model under it."""

    app: Litestar
    client: httpx.AsyncClient
    backend: PostgresBackend
    source: BackendSource


@asynccontextmanager
async def open_ui(
    target: PgTarget, config: UiConfig | None = None, *, dsn: str | None = None
) -> AsyncIterator[InProcessUi]:
    """The app over ``target``'s schema with ``config`` (default: no token, actions on);
    ``dsn`` reaches the database another way (a proxy a test can cut)."""
    backend = await PostgresBackend.connect(dsn or target.dsn, target.schema, max_size=3)
    source = BackendSource(
        backend, database="test", schema=target.schema, settings=dashboard_settings()
    )
    app = create_app(source, config or UiConfig())
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            yield InProcessUi(app, client, backend, source)
    finally:
        await backend.close()
