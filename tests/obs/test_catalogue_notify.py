"""The LISTEN connection's instruments on a real server: notifications received by channel,
cancel notifications, a reconnect after the server drops the session, and the connected
gauge, which stops reporting once the backend is closed. The backend is built directly, so
the test installs the hooks ``backend.factory`` installs on every backend it opens."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.constants import events_channel
from taskq_core.obs.backend_hooks import NotifyMetrics
from tests.conftest import PgTarget
from tests.obs.otel_sdk import Sdk
from tests.postgres.test_notify import listeners

pytestmark = pytest.mark.postgres


async def test_notifications_reconnects_and_the_connected_gauge(pg: PgTarget, sdk: Sdk) -> None:
    backend = await PostgresBackend.connect(
        pg.dsn, pg.schema, notify_health_check_interval=0.2, notify_hooks=NotifyMetrics()
    )
    try:
        async with backend.subscribe_wake() as woken, backend.subscribe_cancel_wake() as cancel:
            assert sdk.value("taskq.notify.connected") == 1
            await backend.enqueue(EnqueueArgs("work", {}))
            async with asyncio.timeout(5):
                await woken.wait()
            conn = await asyncpg.connect(pg.dsn)
            try:
                message = json.dumps({"type": "cancel", "job_id": "x"})
                await conn.execute("SELECT pg_notify($1, $2)", events_channel(pg.schema), message)
                async with asyncio.timeout(5):
                    await cancel.wait()
                woken.clear()
                [pid] = await listeners(pg)
                assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
            finally:
                await conn.close()
            async with asyncio.timeout(10):
                await woken.wait()  # set once after the reconnect
            assert sdk.value("taskq.notify.reconnects") == 1
            assert sdk.value("taskq.notify.connected") == 1
        assert sdk.value("taskq.notify.received", taskq__notify__channel="wake") >= 1
        assert sdk.value("taskq.notify.received", taskq__notify__channel="events") == 1
        assert sdk.value("taskq.notify.cancel_received") == 1
    finally:
        await backend.close()
    assert sdk.points("taskq.notify.connected") == []  # a closed listener is not reported
