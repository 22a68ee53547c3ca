"""docs/deploy.md's autoscaling queries, run against a real database: the KEDA PostgreSQL
trigger's SQL and the PromQL of the Prometheus trigger and the HPA adapter rule both count the
queue's pending and running jobs (claimed ones included), not its scheduled or ended ones."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.obs.fleet import FleetMetrics, FleetSettings
from tests.conftest import PgTarget
from tests.obs.test_fleet_metrics import run_to, scrape

pytestmark = pytest.mark.postgres

DOC = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
BACKLOG = 4  # 2 pending + 1 running + 1 claimed in "default"


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    opened = await PostgresBackend.connect(pg.dsn, pg.schema)
    for outcome in ("running", "claimed", "succeeded", "failed"):
        await run_to(opened, "default", "work", outcome)
    await opened.enqueue_batch([EnqueueArgs("work"), EnqueueArgs("work")])
    await opened.enqueue(EnqueueArgs("work", delay=timedelta(hours=1)))
    await opened.enqueue_batch([EnqueueArgs("work", queue="other") for _ in range(5)])
    yield opened
    await opened.close()


async def test_the_keda_postgresql_query_counts_the_backlog(
    backend: PostgresBackend, pg: PgTarget
) -> None:
    (query,) = re.findall(r'query: "(SELECT .*?)"\n', DOC)
    conn = await asyncpg.connect(pg.dsn)
    try:
        assert await conn.fetchval(query.replace("taskq.jobs", f"{pg.schema}.jobs")) == BACKLOG
    finally:
        await conn.close()


async def test_the_promql_counts_the_same_backlog_from_the_fleet_metrics(
    backend: PostgresBackend,
) -> None:
    queries = set(re.findall(r"'(sum\(taskq_fleet_jobs\{.*?\}\))'", DOC))
    assert len(queries) == 1  # the trigger and the adapter rule ask the same
    (query,) = queries
    matched = re.fullmatch(r'sum\((\w+)\{queue="(\w+)", status=~"([\w|]+)"\}\)', query)
    assert matched is not None
    metric, queue, statuses = matched.groups()
    samples = await scrape(FleetMetrics(backend, FleetSettings(window=timedelta(minutes=5))))
    total = sum(
        value
        for (name, labels), value in samples.items()
        if name == metric
        and dict(labels).get("queue") == queue
        and dict(labels).get("status") in statuses.split("|")
    )
    assert total == BACKLOG
