from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
from pathlib import Path

import asyncpg
import pytest
from structlog.testing import capture_logs

from taskq_core.backend.postgres.migrate import (
    default_directory,
    load_migrations,
    migrate_up,
    migration_status,
)
from taskq_core.errors import InvalidIdentifierError
from taskq_core.statemachine import JobStatus
from tests.conftest import TASKQ_BIN, PgTarget

pytestmark = pytest.mark.postgres

EXPECTED_TABLES = {
    "jobs",
    "job_attempts",
    "job_events",
    "workers",
    "actor_config",
    "queues",
    "maintenance_leader",
    "schedules",
    "batches",
    "reservation_slots",
    "rate_limit_buckets",
    "rate_limit_window_entries",
    "rate_limit_lines",
    "jobs_archive",
    "job_attempts_archive",
    "schema_migrations",
}


async def _tables(dsn: str, schema: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
        )
        return {r["table_name"] for r in rows}
    finally:
        await conn.close()


async def test_migrate_on_an_empty_database_creates_every_table(empty_schema: PgTarget) -> None:
    conn = await asyncpg.connect(empty_schema.dsn)
    try:
        result = await migrate_up(conn, empty_schema.schema)
    finally:
        await conn.close()
    assert result.applied == [f"{m.version}_{m.name}" for m in load_migrations()]
    assert EXPECTED_TABLES <= await _tables(empty_schema.dsn, empty_schema.schema)


async def test_second_run_applies_nothing(pg: PgTarget) -> None:
    conn = await asyncpg.connect(pg.dsn)
    try:
        result = await migrate_up(conn, pg.schema)
        states = await migration_status(conn, pg.schema)
    finally:
        await conn.close()
    assert result.applied == []
    assert result.drift == []
    assert {s.status for s in states} == {"applied"}


async def test_job_status_enum_matches_the_state_machine(pg: PgTarget) -> None:
    conn = await asyncpg.connect(pg.dsn)
    try:
        labels = await conn.fetchval(f"SELECT enum_range(NULL::{pg.schema}.job_status)::text[]")
    finally:
        await conn.close()
    assert list(labels) == [s.value for s in JobStatus]


async def test_dispatch_lease_and_promotion_indexes_exist(pg: PgTarget) -> None:
    conn = await asyncpg.connect(pg.dsn)
    try:
        rows = await conn.fetch("SELECT indexname FROM pg_indexes WHERE schemaname = $1", pg.schema)
    finally:
        await conn.close()
    names = {r["indexname"] for r in rows}
    assert {"jobs_dispatch_idx", "jobs_scheduled_idx", "jobs_running_actor_idx"} <= names
    # One index of running jobs (0022): every claim writes an entry in each.
    assert not {"jobs_running_lease_idx", "jobs_running_worker_idx"} & names


async def test_cancel_phase_outside_zero_to_two_is_refused(pg: PgTarget) -> None:
    conn = await asyncpg.connect(pg.dsn)
    try:
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                f"INSERT INTO {pg.schema}.jobs (id, actor, cancel_phase) "
                "VALUES (gen_random_uuid(), 'a', 3)"
            )
    finally:
        await conn.close()


async def test_locked_by_worker_has_no_foreign_key(pg: PgTarget) -> None:
    conn = await asyncpg.connect(pg.dsn)
    try:
        fks = await conn.fetch(
            """SELECT kcu.column_name FROM information_schema.table_constraints tc
               JOIN information_schema.key_column_usage kcu
                 USING (constraint_schema, constraint_name)
               WHERE tc.table_schema = $1 AND tc.table_name = 'jobs'
                 AND tc.constraint_type = 'FOREIGN KEY'""",
            pg.schema,
        )
    finally:
        await conn.close()
    assert "locked_by_worker" not in {r["column_name"] for r in fks}


def test_two_concurrent_migrate_up_processes_apply_each_file_once(empty_schema: PgTarget) -> None:
    env = empty_schema.env()
    procs = [
        subprocess.Popen(
            [TASKQ_BIN, "migrate", "up"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs

    async def ledger() -> list[str]:
        conn = await asyncpg.connect(empty_schema.dsn)
        try:
            rows = await conn.fetch(f"SELECT version FROM {empty_schema.schema}.schema_migrations")
            return [r["version"] for r in rows]
        finally:
            await conn.close()

    versions = asyncio.run(ledger())
    assert sorted(versions) == [m.version for m in load_migrations()]
    applied_lines = [out for out, _ in outputs if "applied" in out]
    assert len(applied_lines) == 1, outputs


async def test_a_changed_file_is_reported_as_drift(empty_schema: PgTarget, tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    shutil.copytree(default_directory(), folder)
    conn = await asyncpg.connect(empty_schema.dsn)
    try:
        await migrate_up(conn, empty_schema.schema, folder)
        first = sorted(folder.glob("*.sql"))[0]
        first.write_text(first.read_text() + "\n-- edited after apply\n")
        states = await migration_status(conn, empty_schema.schema, folder)
        rerun = await migrate_up(conn, empty_schema.schema, folder)
    finally:
        await conn.close()
    assert states[0].status == "drift"
    assert rerun.applied == []
    assert rerun.drift == [f"{states[0].version}_{states[0].name}"]


async def test_no_transaction_migrations_run_statement_by_statement(
    empty_schema: PgTarget, tmp_path: Path
) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0001_base.sql").write_text("CREATE TABLE {schema}.t (id int);\n")
    (folder / "0002_index.sql").write_text(
        "-- taskq:no-transaction\nCREATE INDEX CONCURRENTLY t_id_idx ON {schema}.t (id);\n"
    )
    conn = await asyncpg.connect(empty_schema.dsn)
    try:
        result = await migrate_up(conn, empty_schema.schema, folder)
        index = await conn.fetchval(
            "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 't'",
            empty_schema.schema,
        )
    finally:
        await conn.close()
    assert result.applied == ["0001_base", "0002_index"]
    assert index == "t_id_idx"


async def test_a_migration_that_loses_a_deadlock_to_a_running_transaction_runs_again(
    empty_schema: PgTarget, tmp_path: Path
) -> None:
    """0022's shape under a live fleet: the file takes a weak lock on a table (CREATE INDEX),
    then a strong one (DROP INDEX), while a transaction that read the table waits to write it.
    PostgreSQL ends the later request of the two at once: here the migration's (an advisory
    lock the test holds keeps it between its two statements until the write waits). It runs
    again, and applies, once the other transaction commits."""
    dsn, schema = empty_schema.dsn, empty_schema.schema
    gate = random.randrange(1, 2**62)
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0001_base.sql").write_text(
        "CREATE TABLE {schema}.t (id int);\nCREATE INDEX t_old_idx ON {schema}.t (id);\n"
    )
    migrator, fleet, observer = [await asyncpg.connect(dsn) for _ in range(3)]

    async def waits_on_a_lock(conn: asyncpg.Connection) -> None:
        async with asyncio.timeout(30):
            query = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1"
            while not await observer.fetchval(query, conn.get_server_pid()):
                await asyncio.sleep(0.02)

    try:
        await migrate_up(migrator, schema, folder)
        (folder / "0002_swap_index.sql").write_text(
            "CREATE INDEX t_new_idx ON {schema}.t (id);\n"
            f"SELECT pg_advisory_xact_lock({gate});\n"
            "DROP INDEX {schema}.t_old_idx;\n"
        )
        reading = fleet.transaction()
        await reading.start()
        await fleet.fetch(f"SELECT * FROM {schema}.t")
        await observer.execute("SELECT pg_advisory_lock($1)", gate)
        with capture_logs() as logs:
            migrating = asyncio.create_task(migrate_up(migrator, schema, folder))
            await waits_on_a_lock(migrator)  # at the gate, holding CREATE INDEX's lock
            writing = asyncio.create_task(fleet.execute(f"INSERT INTO {schema}.t VALUES (1)"))
            await waits_on_a_lock(fleet)
            await observer.execute("SELECT pg_advisory_unlock($1)", gate)
            await asyncio.wait_for(writing, 30)  # the migration's transaction was ended
            await reading.commit()
            result = await asyncio.wait_for(migrating, 30)
        indexes = await observer.fetch(
            "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 't'", schema
        )
        rows = await observer.fetchval(f"SELECT count(*) FROM {schema}.t")
    finally:
        for conn in (migrator, fleet, observer):
            await conn.close()
    assert result.applied == ["0002_swap_index"]
    assert [r["indexname"] for r in indexes] == ["t_new_idx"]
    assert rows == 1  # the fleet's write went through
    retried = [e for e in logs if e["event"] == "migration_retried"]
    assert [(e["migration"], e["attempt"]) for e in retried] == [("0002_swap_index", 1)]


async def test_unsafe_schema_is_rejected_before_any_sql(pg_server_dsn: str) -> None:
    conn = await asyncpg.connect(pg_server_dsn)
    try:
        with pytest.raises(InvalidIdentifierError):
            await migrate_up(conn, "x;drop")
        exists = await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'x%'")
    finally:
        await conn.close()
    assert exists == 0
