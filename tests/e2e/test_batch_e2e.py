"""A 10,000-child batch with a finalizer through a real `taskq worker --until-idle` process:
every child succeeds, the finalizer is made once, and it starts only after every child
finished (both read on the server's clock)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from uuid import UUID

import asyncpg
import pytest

from taskq_core.backend.protocol.batches import BATCH_ID_KEY, FINALIZES_KEY
from taskq_core.client import EnqueueItem, JobsClient
from tests.conftest import TASKQ_BIN, PgTarget

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
ACTORS = "tests.e2e.e2e_actors:registry"
CHILDREN = 10_000
ENV = {
    "TASKQ_HEALTH_ENABLED": "false",
    "TASKQ_LOG_LEVEL": "WARNING",
    "TASKQ_IDLE_SETTLE_WINDOW": "0",
    "TASKQ_IDLE_POLL_INTERVAL": "0.05",
}


@pytest.mark.slow
async def test_a_ten_thousand_child_batch_runs_its_finalizer_once_after_every_child(
    pg: PgTarget, tmp_path: Path
) -> None:
    async with JobsClient(pg.dsn, schema=pg.schema) as client:
        made = await client.enqueue_batch(
            [EnqueueItem("echo", {"n": n}) for n in range(CHILDREN)],
            finalizer=EnqueueItem("echo", {"final": True}),
        )
    batch_id = UUID(made[0].metadata[BATCH_ID_KEY])
    log = tmp_path / "worker.log"
    with log.open("w") as sink:
        proc = await asyncio.create_subprocess_exec(
            TASKQ_BIN, "worker", "--actors", ACTORS, "--until-idle", "--concurrency", "16",
            cwd=ROOT, env=pg.env(**ENV), stdout=subprocess.DEVNULL, stderr=sink,
        )  # fmt: skip
        try:
            code = await asyncio.wait_for(proc.wait(), 300)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert code == 0, log.read_text()[-4000:]
    conn = await asyncpg.connect(pg.dsn)
    try:
        children = await conn.fetch(
            f"SELECT status::text, count(*), max(finished_at) AS last FROM {pg.schema}.jobs "
            "WHERE metadata->>'batch_id' = $1 GROUP BY 1",
            str(batch_id),
        )
        finalizers = await conn.fetch(
            f"SELECT id, status::text, started_at FROM {pg.schema}.jobs WHERE metadata->>$1 = $2",
            FINALIZES_KEY,
            str(batch_id),
        )
        batch = await conn.fetchrow(
            f"SELECT status, finalizer_job_id FROM {pg.schema}.batches WHERE id = $1", batch_id
        )
    finally:
        await conn.close()
    assert [(r["status"], r["count"]) for r in children] == [("succeeded", CHILDREN)]
    [final] = finalizers
    assert final["status"] == "succeeded"
    assert final["started_at"] >= children[0]["last"]
    assert (batch["status"], batch["finalizer_job_id"]) == ("complete", final["id"])
