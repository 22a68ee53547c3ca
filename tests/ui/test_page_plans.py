"""The admin UI's busiest pages stay on indexes on a big ``jobs`` table.

The overview, the queues page and a filtered jobs page (each whole and its live part, the
jobs page's next page too) are rendered by the real app, in process, over a schema holding
100,000 jobs in the shape of benchmarks/ui_sections.py (the figure's 1,000,000, scaled down
so the test stays a test). Every statement the renders send is recorded at the pool,
prepared again on connections planning generically and per value, and EXPLAINed with the
render's own arguments: no plan may read ``jobs`` with a sequential scan (the note of a
paused queue aside, read once, as in taskq top's refresh test). The time the
pages take on 1,000,000 rows is the benchmark's (``benchmarks/bench.py --section ui``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from benchmarks.ui_sections import PAGES, seed_big_table
from taskq_cli.dashboard.source import BackendSource
from taskq_cli.ui.app import create_app
from taskq_cli.ui.config import UiConfig, dashboard_settings
from taskq_core.backend.postgres.backend import PostgresBackend
from tests.conftest import PgTarget
from tests.tui.test_top_explain import (
    PAUSE_NOTE_READ,
    RecordingPool,
    _explain,
    index_names,
    seq_scans_of_jobs,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.fresh_schema]

ROWS = 100_000
# The plans the pool's statements may run with; a statement run on an acquired connection
# (the operator's filter reads, after ``use_custom_plans``) is planned per value only.
BOTH_MODES = ("force_generic_plan", "force_custom_plan")
CUSTOM_ONLY = ("force_custom_plan",)
# A jobs page link to the next page (its keyset cursor), wherever the template puts it.
NEXT_LINK = re.compile(r'href="(/jobs\?[^"]*(?:after|cursor)=[^"]+)"')


class _RecordingConnection:
    """A connection acquired from the pool that records its statements."""

    def __init__(self, conn: asyncpg.Connection, statements: list[tuple[str, tuple[Any, ...]]]):
        self._conn = conn
        self._statements = statements

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._conn, name)
        if name not in ("fetch", "fetchrow", "fetchval"):
            return attribute

        async def recorded(query: str, *args: Any, **kwargs: Any) -> Any:
            self._statements.append((query, args))
            return await attribute(query, *args, **kwargs)

        return recorded


class _Acquired:
    def __init__(self, pool: asyncpg.Pool, statements: list[tuple[str, tuple[Any, ...]]]):
        self._context = pool.acquire()
        self._statements = statements

    async def __aenter__(self) -> _RecordingConnection:
        return _RecordingConnection(await self._context.__aenter__(), self._statements)

    async def __aexit__(self, *exc: object) -> None:
        await self._context.__aexit__(*exc)


class PagePool(RecordingPool):
    """taskq top's recording pool, plus the statements run on acquired connections."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool)
        self.acquired: list[tuple[str, tuple[Any, ...]]] = []

    def acquire(self) -> _Acquired:
        return _Acquired(self._pool, self.acquired)


@pytest.fixture
async def recorded(pg: PgTarget) -> AsyncIterator[tuple[httpx.AsyncClient, PagePool]]:
    """A client of the app over the big table, and the pool recording its statements."""
    await seed_big_table(pg.dsn, pg.schema, ROWS)
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=3)
    recorder = PagePool(backend._pool)
    backend._pool = recorder  # type: ignore[assignment]
    source = BackendSource(
        backend, database="test", schema=pg.schema, settings=dashboard_settings()
    )
    app = create_app(source, UiConfig())
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client, recorder
    finally:
        await backend.close()


async def _render(client: httpx.AsyncClient, path: str) -> str:
    response = await client.get(path)
    assert response.status_code == 200, (path, response.status_code, response.text[:500])
    return response.text


@pytest.mark.timeout(300)
async def test_the_pages_of_the_figure_read_jobs_through_indexes(
    pg: PgTarget, recorded: tuple[httpx.AsyncClient, PagePool]
) -> None:
    client, recorder = recorded
    for _, path in PAGES:
        joiner = "&" if "?" in path else "?"
        body = await _render(client, path)
        await _render(client, f"{path}{joiner}part=live")
        if path.startswith("/jobs"):
            following = NEXT_LINK.search(body)
            assert following, "a full jobs page links to the next one"
            await _render(client, following.group(1).replace("&amp;", "&"))

    # The note of the paused queue is read apart, as taskq top reads it (get_queue, which
    # counts that queue's jobs): once for the server's life, not on every render.
    notes = [args for query, args in recorder.statements if query.startswith(PAUSE_NOTE_READ)]
    assert notes == [("queue_7",)]
    unique: dict[str, tuple[str, tuple[Any, ...], tuple[str, ...]]] = {}
    for query, args in recorder.statements:
        if not query.startswith(PAUSE_NOTE_READ):
            unique.setdefault(query + repr(args), (query, args, BOTH_MODES))
    for query, args in recorder.acquired:
        unique.setdefault(query + repr(args), (query, args, CUSTOM_ONLY))
    # The jobs page's own read ran on an acquired connection: it was recorded too.
    assert any(modes == CUSTOM_ONLY for _, _, modes in unique.values())
    offenders: dict[str, list[str]] = {}
    walked: set[str] = set()
    for mode in BOTH_MODES:
        conn = await asyncpg.connect(pg.dsn, server_settings={"plan_cache_mode": mode})
        try:
            for index, (query, args, modes) in enumerate(unique.values()):
                if mode not in modes:
                    continue
                plan = await _explain(conn, f"page_{index}", query, args)
                walked |= index_names(plan)
                if scans := seq_scans_of_jobs(plan):
                    offenders[f"{mode}: {query.strip().splitlines()[0]} {args}"] = scans
        finally:
            await conn.close()
    assert offenders == {}
    # The counts walk the partial indexes made for them; the failures list its own.
    assert {"jobs_fair_dispatch_idx", "jobs_status_queue_idx", "jobs_finished_idx"} <= walked, (
        walked
    )
