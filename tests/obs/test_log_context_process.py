"""A real ``taskq worker`` with TASKQ_LOG_FORMAT unset writes JSON lines to a stderr that is no
terminal, and the lines its actors write (structlog and stdlib ``logging``, async and plain
``def`` actors) carry their job's context."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from tests.conftest import TASKQ_BIN, PgTarget
from tests.e2e.test_worker_cli import FAST_ENV, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

ACTORS = "tests.obs.progress_log_actors:registry"


async def test_a_workers_actor_lines_are_json_with_the_job_context(pg: PgTarget) -> None:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2)
    try:
        first = await backend.enqueue(EnqueueArgs("log_async", {"n": 1}))
        second = await backend.enqueue(EnqueueArgs("log_sync", {"n": 2}))
    finally:
        await backend.close()
    env = pg.env(**{**FAST_ENV, "TASKQ_LOG_LEVEL": "INFO"})
    proc = await asyncio.create_subprocess_exec(
        TASKQ_BIN, "worker", "--actors", ACTORS, "--until-idle", "--concurrency", "1",
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    records = [json.loads(line) for line in err.decode().splitlines()]  # every line is JSON
    by_event = {record["event"]: record for record in records}
    for event, job in [
        ("async_structlog_line", first),
        ("async stdlib line 1", first),
        ("sync_structlog_line", second),
        ("sync stdlib line 2", second),
    ]:
        record = by_event[event]
        assert (record["job_id"], record["actor"], record["queue"], record["attempt"]) == (
            str(job.id),
            job.actor,
            "default",
            1,
        ), record
    assert by_event["sync stdlib line 2"]["logger"] == "tests.obs.actors"
    assert "job_id" not in by_event["worker_stopped"]
