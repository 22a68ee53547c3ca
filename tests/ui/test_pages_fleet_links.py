"""TASKQ_ADMIN_URL says where users reach the web UI: ``taskq jobs show`` then prints the
job's page there (a link for an alert or a chat), and prints nothing of the kind without it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from uuid import UUID

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from tests.conformance.states import args
from tests.conftest import CliResult, PgTarget

pytestmark = [pytest.mark.postgres]


async def _enqueue(pg: PgTarget) -> UUID:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=1)
    try:
        return (await backend.enqueue(args(queue="emails"))).id
    finally:
        await backend.close()


def test_jobs_show_links_the_jobs_page_when_the_ui_url_is_set(
    pg: PgTarget, taskq_cli: Callable[..., CliResult]
) -> None:
    job_id = asyncio.run(_enqueue(pg))

    # Without the setting first: the runner keeps what a call set in the environment.
    plain = taskq_cli("jobs", "show", str(job_id), env=pg.env())
    assert plain.exit_code == 0, plain.stderr
    assert not any(line.startswith("web ") for line in plain.stdout.splitlines())

    linked = taskq_cli(
        "jobs", "show", str(job_id), env=pg.env(TASKQ_ADMIN_URL="https://q.example/")
    )
    assert linked.exit_code == 0, linked.stderr
    fields = dict(line.split(maxsplit=1) for line in linked.stdout.splitlines() if " " in line)
    assert fields["web"] == f"https://q.example/jobs/{job_id}"
