from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest

from tests.conftest import PgTarget

pytestmark = pytest.mark.postgres


def test_migrate_up_then_status_json(taskq_cli: Any, empty_schema: PgTarget) -> None:
    env = empty_schema.env()
    up = taskq_cli("migrate", "up", env=env)
    assert up.exit_code == 0, up.stderr
    assert "applied" in up.stdout
    again = taskq_cli("migrate", "up", env=env)
    assert again.exit_code == 0
    assert "up to date" in again.stdout
    status = taskq_cli("migrate", "status", "--json", env=env)
    assert status.exit_code == 0
    document = json.loads(status.stdout)
    assert document["pending"] == 0
    assert {m["status"] for m in document["migrations"]} == {"applied"}
    assert all("T" in m["applied_at"] for m in document["migrations"])


def test_status_lists_pending_before_migrating(taskq_cli: Any, empty_schema: PgTarget) -> None:
    status = taskq_cli("migrate", "status", env=empty_schema.env())
    assert status.exit_code == 0
    assert "pending" in status.stdout


def test_status_warns_on_drift(taskq_cli: Any, pg: PgTarget) -> None:
    async def tamper() -> None:
        conn = await asyncpg.connect(pg.dsn)
        try:
            await conn.execute(f"UPDATE {pg.schema}.schema_migrations SET checksum = 'x'")
        finally:
            await conn.close()

    asyncio.run(tamper())
    result = taskq_cli("migrate", "status", env=pg.env())
    assert result.exit_code == 0
    assert "drift" in result.stdout
    assert "checksum drift" in result.stderr


def test_flags_after_the_subcommand_override_the_environment(
    taskq_cli: Any, empty_schema: PgTarget
) -> None:
    result = taskq_cli(
        "migrate",
        "up",
        "--dsn",
        empty_schema.dsn,
        "--schema",
        empty_schema.schema,
        env={"TASKQ_PG_DSN": "postgresql://nobody@127.0.0.1:1/none", "TASKQ_SCHEMA_NAME": "other"},
    )
    assert result.exit_code == 0, result.stderr
    assert empty_schema.schema in result.stdout


def test_unsafe_schema_name_is_one_line_exit_1(taskq_cli: Any) -> None:
    result = taskq_cli(
        "--schema",
        "x;drop",
        "migrate",
        "up",
        env={"TASKQ_PG_DSN": "postgresql://nobody@127.0.0.1:1/none"},
    )
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    # Named by the flag it came from (issue 38: errors caused by a flag name the flag).
    assert "--schema" in result.stderr and "Traceback" not in result.stderr


def test_unreachable_database_is_one_line_exit_1(taskq_cli: Any) -> None:
    result = taskq_cli("migrate", "up", "--dsn", "postgresql://nobody@127.0.0.1:1/none")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "cannot connect to PostgreSQL at 127.0.0.1:1/none" in result.stderr
    assert "TASKQ_PG_DSN=embedded" in result.stderr


def test_default_dsn_failure_names_the_zero_setup_option(taskq_cli: Any) -> None:
    result = taskq_cli("migrate", "status", env={"PGCONNECT_TIMEOUT": "2"})
    assert result.exit_code == 1
    assert "localhost:5432/taskq" in result.stderr
    assert "TASKQ_PG_DSN=embedded" in result.stderr


def test_malformed_dsn_is_one_line_exit_1(taskq_cli: Any) -> None:
    result = taskq_cli("migrate", "up", "--dsn", "mysql://x")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: invalid value of --dsn")
    assert result.stderr.count("\n") == 1


def test_a_malformed_dsn_from_the_environment_names_the_variable(taskq_cli: Any) -> None:
    result = taskq_cli("migrate", "up", env={"TASKQ_PG_DSN": "mysql://x"})
    assert result.exit_code == 1
    assert result.stderr.startswith("error: invalid setting TASKQ_PG_DSN")


def test_debug_shows_the_traceback(taskq_cli: Any) -> None:
    result = taskq_cli("--debug", "migrate", "up", "--dsn", "postgresql://nobody@127.0.0.1:1/none")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr


def test_usage_errors_exit_1_not_2(taskq_cli: Any) -> None:
    result = taskq_cli("migrate", "sideways")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "No such command" in result.stderr


def test_version_prints_and_exits_0(taskq_cli: Any) -> None:
    result = taskq_cli("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("taskq ")


def test_status_check_fails_while_a_migration_is_pending(
    taskq_cli: Any, empty_schema: PgTarget
) -> None:
    env = empty_schema.env()
    pending = taskq_cli("migrate", "status", "--check", env=env)
    assert pending.exit_code == 1
    assert "pending" in pending.stdout  # the listing is still printed
    [line] = pending.stderr.splitlines()
    assert line.startswith(f"error: schema {empty_schema.schema} is not current: ")
    assert "pending (0001_initial, " in line and "run 'taskq migrate up'" in line
    assert taskq_cli("migrate", "up", env=env).exit_code == 0
    current = taskq_cli("migrate", "status", "--check", "--json", env=env)
    assert current.exit_code == 0, current.stderr
    assert json.loads(current.stdout)["pending"] == 0


def test_status_check_fails_on_drift(taskq_cli: Any, pg: PgTarget) -> None:
    async def tamper() -> None:
        conn = await asyncpg.connect(pg.dsn)
        try:
            await conn.execute(
                f"UPDATE {pg.schema}.schema_migrations SET checksum = 'x' WHERE version = '0001'"
            )
        finally:
            await conn.close()

    asyncio.run(tamper())
    result = taskq_cli("migrate", "status", "--check", env=pg.env())
    assert result.exit_code == 1
    assert "1 changed after being applied (0001_initial)" in result.stderr.splitlines()[-1]


def test_a_worker_on_an_unmigrated_schema_says_so_in_one_line(pg: PgTarget) -> None:
    import subprocess

    from tests.conftest import TASKQ_BIN

    result = subprocess.run(
        [TASKQ_BIN, "worker", "--actors", "tests.e2e.e2e_actors:registry", "--until-idle"],
        env=pg.env(TASKQ_SCHEMA_NAME="nope_not_migrated"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    from taskq_core.backend.factory import describe_dsn

    assert result.stderr.strip().splitlines()[-1] == (
        "error: schema 'nope_not_migrated' on "
        f"{describe_dsn(pg.dsn)} is not migrated; run 'taskq migrate up'"
    )
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr
