"""`taskq enqueue ACTOR` by name gets the retry policy and priority its workers registered."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from taskq_core.statemachine import JobStatus
from tests.cli.conftest import Db, parse_json
from tests.conftest import TASKQ_BIN, CliResult, PgTarget

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]


@pytest.fixture
def flaky_module(tmp_path: Path) -> str:
    """An importable actors module (the CLI and the worker run in tmp_path): an actor that
    always fails, allowed 2 attempts with no backoff; returns MOD:ATTR."""
    name = f"flaky_actors_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from datetime import timedelta\n"
        "from taskq_core import RetryPolicy, actor\n\n"
        "@actor(queue='flaky', priority=5,\n"
        "       retry=RetryPolicy(max_attempts=2, base=timedelta(0), jitter=0.0))\n"
        "async def flaky(payload: dict) -> None:\n"
        "    raise RuntimeError('always fails')\n\n"
        "registry = [flaky]\n"
    )
    return f"{name}:registry"


def worker_until_idle(pg: PgTarget, actors: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real ``taskq worker``: registers its actors, runs what is waiting, exits."""
    return subprocess.run(
        [TASKQ_BIN, "worker", "--actors", actors, "--queues", "flaky", "--until-idle"],
        env=pg.env(TASKQ_SCHEDULED_WAKE_INTERVAL="0.1"),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_by_name_job_of_a_two_attempt_actor_fails_after_two_of_two(
    cli: Cli, db: Db, pg: PgTarget, flaky_module: str, tmp_path: Path
) -> None:
    started = worker_until_idle(pg, flaky_module, tmp_path)  # registers flaky, nothing to run
    assert started.returncode == 0, started.stderr
    config = parse_json(cli("actor-config", "get", "flaky", "--json"))
    assert config["retry"] == {"kind": "transient", "max_attempts": 2, "time_budget_seconds": None}
    assert config["priority"] == 5
    shown = cli("actor-config", "get", "flaky")
    assert "transient, 2 attempts" in shown.stdout, shown.stdout

    result = cli("enqueue", "flaky")  # by name: this process never imports the actor
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    job = db.get(result.stdout.strip())
    assert (job.queue, job.retry_kind, job.max_attempts, job.priority) == (
        "flaky",
        "transient",
        2,
        5,
    )

    ran = worker_until_idle(pg, flaky_module, tmp_path)
    assert ran.returncode == 3, ran.stderr  # --until-idle: some jobs failed
    job = db.get(job.id)
    assert (job.status, job.attempt, job.max_attempts) == (JobStatus.FAILED, 2, 2)
    shown = cli("jobs", "show", str(job.id))
    assert shown.exit_code == 0, shown.stderr
    (attempt_line,) = [line for line in shown.stdout.splitlines() if line.startswith("attempt ")]
    assert attempt_line.split(maxsplit=1)[1] == "#2, 2 of 2 used (transient)"


def test_actor_config_get_shows_the_stored_policy_or_that_none_is_stored_yet(
    cli: Cli, db: Db
) -> None:
    db.register_actor("legacy", queue="media")  # a declaration without a policy
    shown = cli("actor-config", "get", "legacy")
    assert shown.exit_code == 0, shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines() if line.strip()}
    assert "written at the next worker start" in lines["retry"]
    assert parse_json(cli("actor-config", "get", "legacy", "--json"))["retry"] is None
