"""The environment a workgroup's children start from names the supervisor's database."""

from __future__ import annotations

import pytest

from taskq_cli.commands.workgroup import child_environment
from taskq_core.settings import TaskqSettings


def test_children_get_the_database_and_schema_the_supervisor_was_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TASKQ_PG_DSN", "postgresql://u@h/db")
    monkeypatch.setenv("TASKQ_PG_DSN_POOLED", "postgresql://u@bouncer/db")
    same = child_environment(TaskqSettings.load(schema_name="jobs"))
    assert same["TASKQ_PG_DSN"] == "postgresql://u@h/db"
    assert same["TASKQ_PG_DSN_POOLED"] == "postgresql://u@bouncer/db"
    assert same["TASKQ_SCHEMA_NAME"] == "jobs"
    # --dsn for another database: the environment's PgBouncer (of the other one) is dropped.
    other = child_environment(TaskqSettings.load(pg_dsn="postgresql://u@elsewhere/other"))
    assert other["TASKQ_PG_DSN"] == "postgresql://u@elsewhere/other"
    assert "TASKQ_PG_DSN_POOLED" not in other and "TASKQ_PG_DSN_DIRECT" not in other
