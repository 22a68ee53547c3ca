"""Reads off the primary (TASKQ_PG_DSN_REPLICA) against a real streaming replica.

A primary and its standby of the test's own (``chaos/replication.py``, never the shared
server). To tell which server answered, the standby's replay is paused
(``pg_wal_replay_pause``) and a job enqueued on the primary after that: a read that sees it
came from the primary, one that does not from the replica. The read-only commands, the
dashboards' source, the web UI and the fleet metrics must read the replica and say how far
behind it is; the operator's writes (cancel, pause) must reach the primary, where the
replica would refuse them (read-only transactions).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import pytest

from chaos.replication import ReplicatedPair
from taskq_cli.commands.top import open_dashboard_source
from taskq_cli.dashboard.filters import JobsFilter
from taskq_cli.dashboard.source import BackendSource
from taskq_cli.ui.app import create_app
from taskq_cli.ui.config import UiConfig, dashboard_settings
from taskq_core.backend.factory import Role, open_backend
from taskq_core.backend.postgres.migrate import migrate_up
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.liveness import DEFAULT_STALE_AFTER
from taskq_core.obs.fleet import FleetMetrics, FleetSettings
from taskq_core.settings import TaskqSettings
from tests.conftest import CliResult
from tests.tui.conftest import settle, top_app

pytestmark = pytest.mark.slow

SCHEMA = "taskq"
SAME_ORIGIN = {"sec-fetch-site": "same-origin", "origin": "http://127.0.0.1"}


@pytest.fixture(scope="module")
def pair() -> Iterator[ReplicatedPair]:
    """Primary and standby, migrated, in a directory the servers' user can cross."""
    servers = ReplicatedPair(Path(tempfile.mkdtemp(prefix="taskq-replica-")))
    try:
        servers.start()
        asyncio.run(_migrate(servers.primary_dsn))
        yield servers
    finally:
        servers.close()


async def _migrate(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate_up(conn, SCHEMA)
    finally:
        await conn.close()


def _settings(pair: ReplicatedPair) -> TaskqSettings:
    return TaskqSettings(
        pg_dsn=pair.primary_dsn, pg_dsn_replica=pair.standby_dsn, schema_name=SCHEMA
    )


def _env(pair: ReplicatedPair) -> dict[str, str]:
    return {
        "TASKQ_PG_DSN": pair.primary_dsn,
        "TASKQ_PG_DSN_REPLICA": pair.standby_dsn,
        "TASKQ_SCHEMA_NAME": SCHEMA,
    }


async def _on(dsn: str, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


async def _enqueue(pair: ReplicatedPair, actor: str) -> UUID:
    """A job enqueued on the primary."""
    async with _primary(pair) as backend:
        return (await backend.enqueue(EnqueueArgs(actor, {}, queue="replica_q"))).id


@asynccontextmanager
async def _primary(pair: ReplicatedPair) -> AsyncIterator[Any]:
    backend = await open_backend(_settings(pair), Role.COMMAND)
    try:
        yield backend
    finally:
        await backend.close()


async def _status_on_primary(pair: ReplicatedPair, job_id: UUID) -> str:
    status: str = await _on(
        pair.primary_dsn, f"SELECT status::text FROM {SCHEMA}.jobs WHERE id = $1", job_id
    )
    return status


async def _paused_replay_with_a_job_behind(pair: ReplicatedPair) -> tuple[UUID, UUID]:
    """A job the replica has replayed, then its replay paused and a job it has received but
    not replayed: (seen, unseen)."""
    seen = await _enqueue(pair, "replayed")
    await pair.wait_replayed()
    await _on(pair.standby_dsn, "SELECT pg_wal_replay_pause()")
    unseen = await _enqueue(pair, "behind")
    target = await _on(pair.primary_dsn, "SELECT pg_current_wal_lsn()::text")
    while not await _on(
        pair.standby_dsn, "SELECT pg_last_wal_receive_lsn() >= $1::text::pg_lsn", target
    ):
        await asyncio.sleep(0.02)  # streaming takes a moment; the replay stays paused
    return seen, unseen


async def _resume(pair: ReplicatedPair) -> None:
    await _on(pair.standby_dsn, "SELECT pg_wal_replay_resume()")
    await pair.wait_replayed()


def test_read_commands_read_the_replica_and_say_how_far_behind_writes_go_to_the_primary(
    pair: ReplicatedPair, taskq_cli: Any
) -> None:
    seen, unseen = asyncio.run(_paused_replay_with_a_job_behind(pair))
    env = _env(pair)
    try:
        listed: CliResult = taskq_cli("jobs", "list", "--queue", "replica_q", "--json", env=env)
        assert listed.exit_code == 0, listed.stderr
        ids = {job["id"] for job in json.loads(listed.stdout)["jobs"]}
        assert str(seen) in ids and str(unseen) not in ids  # the replica answered
        note = listed.stderr.strip()
        assert note.startswith("note: read from the replica at 127.0.0.1:"), note
        assert note.endswith("behind the primary") and ", 0ms behind" not in note, note

        missing: CliResult = taskq_cli("jobs", "show", str(unseen), env=env)
        assert missing.exit_code == 1 and "no job with id" in missing.stderr, missing.stderr
        queues: CliResult = taskq_cli("queues", "list", "--json", env=env)
        assert queues.exit_code == 0 and "behind the primary" in queues.stderr

        # Writes go to the primary (the standby would refuse them) and say no note.
        cancelled: CliResult = taskq_cli("cancel", str(unseen), env=env)
        assert cancelled.exit_code == 0, cancelled.stderr
        assert "note:" not in cancelled.stderr
        assert asyncio.run(_status_on_primary(pair, unseen)) == "cancelled"
    finally:
        asyncio.run(_resume(pair))
    caught_up: CliResult = taskq_cli("jobs", "show", str(unseen), "--json", env=env)
    assert caught_up.exit_code == 0, caught_up.stderr
    assert json.loads(caught_up.stdout)["job"]["status"] == "cancelled"
    assert "behind the primary" in caught_up.stderr

    # Without the setting, the same command reads the primary and says nothing of it.
    primary_env = {**env, "TASKQ_PG_DSN_REPLICA": ""}
    plain: CliResult = taskq_cli("jobs", "list", "--queue", "replica_q", "--json", env=primary_env)
    assert plain.exit_code == 0 and plain.stderr == ""


async def test_the_dashboards_read_the_replica_and_act_on_the_primary(
    pair: ReplicatedPair,
) -> None:
    seen, unseen = await _paused_replay_with_a_job_behind(pair)
    try:
        async with open_dashboard_source(
            _settings(pair), dashboard_settings(), max_size=3
        ) as source:
            assert source.replica is not None and source.writer is not None
            snapshot = await source.snapshot(JobsFilter(statuses=(), queue="replica_q"))
            shown = {job.id for job in snapshot.jobs}
            assert seen in shown and unseen not in shown
            assert snapshot.staleness is not None
            assert snapshot.staleness.endswith("behind the primary"), snapshot.staleness
            assert str(pair.standby_port) in source.database

            # The web UI: every page says where it read; its actions reach the primary (the
            # replica, its replay paused, still shows the job pending).
            await _web_ui_reads_the_replica(source, seen, unseen)
            assert await _status_on_primary(pair, seen) == "cancelled"
            assert (await source.backend.get(seen)).status == "pending"  # type: ignore[union-attr]

            # taskq top says where it reads and how far behind; its pause goes to the primary.
            app = top_app(source)
            async with app.run_test(size=(160, 40)) as pilot:
                await settle(pilot)
                summary = str(app.summary.render())
                assert f"database 127.0.0.1:{pair.standby_port}/postgres (replica, " in summary
                assert "behind the primary)" in summary
            await source.set_queue_paused("replica_q", True, "replica test")
            paused = await _on(
                pair.primary_dsn,
                f"SELECT paused FROM {SCHEMA}.queues WHERE name = 'replica_q'",
            )
            assert paused is True
    finally:
        await _resume(pair)


async def _web_ui_reads_the_replica(source: BackendSource, seen: UUID, unseen: UUID) -> None:
    app = create_app(source, UiConfig())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        page = await client.get("/jobs?queue=replica_q")
        assert page.status_code == 200
        assert str(seen) in page.text and str(unseen) not in page.text
        assert 'id="replica"' in page.text and "behind the primary" in page.text
        live = await client.get("/jobs?queue=replica_q&part=live")
        assert 'hx-swap-oob="true"' in live.text and "behind the primary" in live.text
        answer = await client.post(f"/api/jobs/{seen}/cancel", headers=SAME_ORIGIN)
        assert answer.status_code in (200, 201), answer.text


async def test_fleet_metrics_read_the_replica_and_export_its_lag(pair: ReplicatedPair) -> None:
    await _paused_replay_with_a_job_behind(pair)
    try:
        reader = await open_backend(_settings(pair), Role.READER)
        try:
            metrics = FleetMetrics(reader, FleetSettings(stale_after=DEFAULT_STALE_AFTER))
            _, body = await metrics.exposition()
        finally:
            await reader.close()
    finally:
        await _resume(pair)
    text = body.decode()
    assert "taskq_fleet_replica_streaming 1.0" in text
    lag = next(line for line in text.splitlines() if line.startswith("taskq_fleet_replica_lag"))
    assert float(lag.split()[-1]) > 0, lag


def test_a_replica_that_lost_its_primary_says_so(pair: ReplicatedPair, taskq_cli: Any) -> None:
    """Last in the module: it stops the primary."""
    pair.stop_primary("fast")

    async def receiver_gone() -> None:
        streaming = "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'"
        while await _on(pair.standby_dsn, streaming):
            await asyncio.sleep(0.05)

    asyncio.run(asyncio.wait_for(receiver_gone(), 60))
    listed: CliResult = taskq_cli("jobs", "list", "--json", env=_env(pair))
    assert listed.exit_code == 0, listed.stderr
    assert ", not streaming from its primary (last change " in listed.stderr
