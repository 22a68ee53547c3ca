"""A real ``taskq worker --until-idle`` with TASKQ_PG_DSN_POOLED through a real PgBouncer in
transaction mode: the CLI enqueues through it, the worker drains every job, and the writes that
settle jobs go through it (an actor's ``ctx.connection()`` reports PgBouncer's session mark)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import asyncpg
import pytest

from chaos.pgbouncer import PgBouncer
from tests.conftest import TASKQ_BIN, PgTarget
from tests.e2e.test_worker_cli import FAST_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ACTORS = "tests.pgbouncer.pgbouncer_actors:registry"
PLAIN_JOBS, SESSION_JOBS = 300, 50


async def _taskq(env: dict[str, str], *args: str, timeout: float = 60) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        TASKQ_BIN, *args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_worker_drains_with_its_pooled_dsn_through_pgbouncer(
    pg: PgTarget, pgbouncer: PgBouncer
) -> None:
    env = pg.env(**FAST_ENV, TASKQ_PG_DSN_POOLED=pgbouncer.dsn())
    for actor, count in (("echo", PLAIN_JOBS), ("session_name", SESSION_JOBS)):
        code, _, err = await _taskq(env, "enqueue", actor, "--count", str(count))
        assert code == 0, err
    code, _, err = await _taskq(
        env, "worker", "--actors", ACTORS, "--until-idle", "--concurrency", "8", timeout=120
    )
    assert code == 0, err
    assert "Traceback" not in err

    conn = await asyncpg.connect(pg.dsn)
    try:
        counts = await conn.fetch(
            f"SELECT actor, status::text, count(*) FROM {pg.schema}.jobs GROUP BY 1, 2"
        )
        sessions = await conn.fetch(
            f"SELECT DISTINCT result->>'session' AS name FROM {pg.schema}.jobs "
            "WHERE actor = 'session_name'"
        )
    finally:
        await conn.close()
    assert {(r["actor"], r["status"]): r["count"] for r in counts} == {
        ("echo", "succeeded"): PLAIN_JOBS,
        ("session_name", "succeeded"): SESSION_JOBS,
    }
    # Every transactional success was written through PgBouncer, none directly.
    assert sessions
    names = [r["name"] for r in sessions]
    assert all(n.startswith(f"taskq_{pg.schema} - 127.0.0.1:") for n in names), names
