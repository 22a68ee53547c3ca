"""``taskq top`` with TASKQ_PG_DSN_POOLED through a real PgBouncer in transaction mode: its data
source reads every pane, a job's detail and explanation, and acts (retry, pause) through it;
the real ``taskq top`` in a terminal draws the dashboard and exits 0."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pexpect
import pytest

from chaos.pgbouncer import PgBouncer
from taskq_cli.dashboard.filters import JobsFilter
from taskq_cli.dashboard.source import BackendSource
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.statemachine import JobStatus
from tests.conftest import TASKQ_BIN, PgTarget
from tests.tui.seed import SeededDashboard, seed_dashboard

pytestmark = pytest.mark.postgres


@pytest.fixture
async def seeded(
    pg: PgTarget, pgbouncer: PgBouncer
) -> AsyncIterator[tuple[PostgresBackend, SeededDashboard]]:
    """The dashboard seed, written through PgBouncer (the leader's lock direct); the backend
    stays open: it holds the leadership the seed took."""
    backend = await PostgresBackend.connect(
        pgbouncer.dsn(), pg.schema, direct_dsn=pg.dsn, max_size=3
    )
    yield backend, await seed_dashboard(backend)
    await backend.close()


async def test_the_top_data_source_reads_and_acts_through_pgbouncer(
    pg: PgTarget,
    pgbouncer: PgBouncer,
    seeded: tuple[PostgresBackend, SeededDashboard],
) -> None:
    _, seed = seeded
    backend = await PostgresBackend.connect(
        pgbouncer.dsn(), pg.schema, direct_dsn=pg.dsn, max_size=2
    )
    try:
        source = BackendSource(backend, database="pgbouncer", schema=pg.schema)
        snapshot = await source.snapshot(JobsFilter())
        queues = sorted(q.name for q in snapshot.queues)
        assert queues == ["emails", "media", "reports", "webhooks"]
        assert snapshot.leader is not None and snapshot.leader.row.id == seed.leader
        assert {j.id for j in snapshot.jobs} == {j.id for j in seed.failed}

        failed = seed.failed[0]
        detail = await source.job_detail(failed.id)
        assert detail is not None and detail.job.status is JobStatus.FAILED and detail.attempts
        assert (await source.explain(failed.id)).checks

        assert await source.retry_job(failed.id)
        row = await backend.get(failed.id)
        assert row is not None and row.status is JobStatus.PENDING
        await source.set_queue_paused("emails", True)
        emails = await backend.get_queue("emails")
        assert emails is not None and emails.paused
    finally:
        await backend.close()


@pytest.mark.e2e
@pytest.mark.slow
async def test_taskq_top_draws_through_pgbouncer_and_q_exits_0(
    pg: PgTarget, pgbouncer: PgBouncer, seeded: tuple[PostgresBackend, SeededDashboard]
) -> None:
    env = pg.env(
        TASKQ_PG_DSN_POOLED=pgbouncer.dsn(), TERM="xterm-256color", COLUMNS="120", LINES="40"
    )
    child = pexpect.spawn(
        TASKQ_BIN, ["top", "--refresh", "0.5"], env=env, dimensions=(40, 120), timeout=30
    )
    needles = ["webhooks", "Workers", "media-1"]  # a queue row, a pane, the leader's row
    seen: set[str] = set()
    try:
        while len(seen) < len(needles):
            seen.add(needles[child.expect(needles)])
        child.send("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, (child.exitstatus, child.signalstatus)
