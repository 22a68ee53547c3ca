"""Fixtures shared by the tests that need only a real server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.conftest import PgTarget


@pytest.fixture
async def conn(pg: PgTarget) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection to the test's schema's server, closed afterwards."""
    connection = await asyncpg.connect(pg.dsn)
    yield connection
    await connection.close()
