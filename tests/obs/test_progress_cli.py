"""A real ``taskq worker`` runs actors that report progress, then wait for the test: while they
wait, ``taskq jobs show`` has their progress (``--json``: the progress object; text: a bar, the
percentage and the message), and once they finish, their last report."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, JobRow
from tests.conftest import TASKQ_BIN, CliResult, PgTarget
from tests.e2e.test_worker_cli import FAST_ENV, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

ACTORS = "tests.obs.progress_log_actors:registry"
Cli = Callable[..., CliResult]


def enqueue(pg: PgTarget, *items: EnqueueArgs) -> list[JobRow]:
    async def run() -> list[JobRow]:
        backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2)
        try:
            return [await backend.enqueue(item) for item in items]
        finally:
            await backend.close()

    return asyncio.run(run())


def show(taskq_cli: Cli, pg: PgTarget, job: JobRow, *flags: str) -> CliResult:
    result = taskq_cli("jobs", "show", str(job.id), *flags, env=pg.env())
    assert result.exit_code == 0, result.stderr
    return result


def shown_progress(taskq_cli: Cli, pg: PgTarget, job: JobRow, seq: int) -> dict[str, Any]:
    """The job's ``--json`` document once its progress reached ``seq`` (polled, bounded)."""
    deadline = time.monotonic() + 30
    while True:
        document: dict[str, Any] = json.loads(show(taskq_cli, pg, job, "--json").stdout)
        progress = document["progress"]
        if progress is not None and progress["seq"] >= seq:
            return document
        assert time.monotonic() < deadline, f"no progress {seq} on {job.id}: {document}"
        time.sleep(0.05)


@pytest.mark.slow  # a worker process and a dozen CLI runs: about 3 s
def test_jobs_show_has_the_progress_of_running_and_finished_jobs(
    taskq_cli: Cli, pg: PgTarget, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    payload = {"release": str(release)}
    jobs = enqueue(
        pg,
        EnqueueArgs("progress_then_wait", payload),
        EnqueueArgs("sync_progress_then_wait", payload),
    )
    env = pg.env(**FAST_ENV)
    worker = subprocess.Popen(
        [TASKQ_BIN, "worker", "--actors", ACTORS, "--until-idle", "--concurrency", "2"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for job in jobs:
            document = shown_progress(taskq_cli, pg, job, 1)
            assert document["job"]["status"] == "running"
            progress = document["progress"]
            assert {k: progress[k] for k in ("seq", "current", "total", "percent", "message")} == {
                "seq": 1,
                "current": 3,
                "total": 10,
                "percent": 30.0,
                "message": "three down",
            }
            [line] = [
                ln
                for ln in show(taskq_cli, pg, job).stdout.splitlines()
                if ln.startswith("progress")
            ]
            assert "[######--------------]  30% (3/10) three down" in line, line
        release.touch()
        _, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    for job in jobs:
        document = shown_progress(taskq_cli, pg, job, 2)
        assert document["job"]["status"] == "succeeded"
        progress = document["progress"]
        assert (progress["current"], progress["percent"], progress["message"]) == (
            10,
            100.0,
            "done",
        )
