"""``on_conflict`` under real concurrency: 8 processes enqueue the same unique key at once,
released together, each through its own JobsClient. One job exists afterwards, whatever the
mode; ``return_existing`` hands every process that job; ``replace`` leaves it waiting with one
of the payloads sent, and every process got that same job back."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres

PROCESSES = 8
ENQUEUER = textwrap.dedent(
    """
    import asyncio, json, sys
    from taskq_core.client import JobsClient

    async def main(n: int, mode: str) -> None:
        async with JobsClient() as client:
            await client.backend.get_latest_reclaim_event_id()  # connected: a warm pool
            print("ready", flush=True)
            sys.stdin.readline()  # the start gate
            row = await client.enqueue(
                "work", {"n": n}, unique_key="nightly", delay=3600, on_conflict=mode
            )
            print(json.dumps({"id": str(row.id), "payload": row.payload}), flush=True)

    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
    """
)


@pytest.fixture
async def conn(pg: PgTarget) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(pg.dsn)
    yield connection
    await connection.close()


async def _enqueuer(pg: PgTarget, n: int, mode: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", ENQUEUER, str(n), mode, env=pg.env(),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def race(pg: PgTarget, mode: str) -> list[dict[str, object]]:
    procs = [await _enqueuer(pg, n, mode) for n in range(PROCESSES)]
    for proc in procs:
        assert proc.stdout is not None
        assert (await asyncio.wait_for(proc.stdout.readline(), 60)) == b"ready\n"
    for proc in procs:  # released together
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
    outputs = [await asyncio.wait_for(proc.communicate(), 60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * PROCESSES
    return [json.loads(out) for out, _ in outputs]


@pytest.mark.parametrize("mode", ["return_existing", "replace"])
async def test_eight_processes_enqueueing_one_key_make_one_job(
    pg: PgTarget, conn: asyncpg.Connection, mode: str
) -> None:
    answers = await race(pg, mode)
    rows = await conn.fetch(
        f"SELECT id, status::text, payload::text FROM {pg.schema}.jobs WHERE actor = 'work'"
    )
    assert len(rows) == 1
    [job] = rows
    assert {answer["id"] for answer in answers} == {str(job["id"])}
    assert job["status"] == "scheduled"
    sent = [{"n": n} for n in range(PROCESSES)]
    assert json.loads(job["payload"]) in sent
    replaced = await conn.fetchval(
        f"SELECT count(*) FROM {pg.schema}.job_events WHERE kind = 'replaced'"
    )
    assert replaced == (PROCESSES - 1 if mode == "replace" else 0)
