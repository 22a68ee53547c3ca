"""``on_conflict`` under real concurrency: 8 processes enqueue the same unique key at once,
released together, each through its own JobsClient: first with ``return_existing`` (one key),
then with ``replace`` (another). Either way one job exists afterwards per key; every process got
that job back; a replaced one waits with one of the payloads sent, replaced by the other 7."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap

import asyncpg
import pytest

from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres

PROCESSES = 8
MODES = ("return_existing", "replace")
ENQUEUER = textwrap.dedent(
    """
    import asyncio, json, sys
    from taskq_core.client import JobsClient

    async def main(n: int) -> None:
        async with JobsClient() as client:
            await client.backend.get_latest_reclaim_event_id()  # connected: a warm pool
            for mode in sys.argv[2:]:
                print("ready", flush=True)
                sys.stdin.readline()  # the start gate
                row = await client.enqueue(
                    "work", {"n": n}, unique_key=mode, delay=3600, on_conflict=mode
                )
                print(json.dumps({"id": str(row.id)}), flush=True)

    asyncio.run(main(int(sys.argv[1])))
    """
)


async def _enqueuer(pg: PgTarget, n: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", ENQUEUER, str(n), *MODES, env=pg.env(),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _line(proc: asyncio.subprocess.Process) -> bytes:
    assert proc.stdout is not None
    return await asyncio.wait_for(proc.stdout.readline(), 60)


async def test_eight_processes_enqueueing_one_key_make_one_job(
    pg: PgTarget, conn: asyncpg.Connection
) -> None:
    procs = [await _enqueuer(pg, n) for n in range(PROCESSES)]
    answers: dict[str, set[str]] = {}
    for mode in MODES:
        assert [await _line(proc) for proc in procs] == [b"ready\n"] * PROCESSES
        for proc in procs:  # released together
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
        answers[mode] = {json.loads(await _line(proc))["id"] for proc in procs}
    assert [await asyncio.wait_for(proc.wait(), 60) for proc in procs] == [0] * PROCESSES

    sent = [{"n": n} for n in range(PROCESSES)]
    for mode in MODES:
        rows = await conn.fetch(
            f"SELECT id, status::text, payload::text FROM {pg.schema}.jobs WHERE unique_key = $1",
            mode,
        )
        assert len(rows) == 1, mode
        [job] = rows
        assert answers[mode] == {str(job["id"])}, mode
        assert job["status"] == "scheduled" and json.loads(job["payload"]) in sent
    replaced = await conn.fetch(
        f"SELECT j.unique_key, count(*) AS n FROM {pg.schema}.job_events e "
        f"JOIN {pg.schema}.jobs j ON j.id = e.job_id WHERE e.kind = 'replaced' GROUP BY 1"
    )
    assert {r["unique_key"]: r["n"] for r in replaced} == {"replace": PROCESSES - 1}
