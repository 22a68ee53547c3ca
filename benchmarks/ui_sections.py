"""The admin UI over a big ``jobs`` table: how long the overview, the queues page and a
filtered jobs page take to render on a real ``taskq ui serve``.

``seed_big_table`` fills a schema with history (a job every 200 ms back from now) in one
INSERT ... SELECT generate_series (most jobs succeeded, a backlog waiting, failures with
errors, a few hundred running on four workers, a paused queue); the plan test of the pages
(tests/ui/test_page_plans.py) seeds the same shape with fewer rows. ``measure`` starts the
server over it and times requests to each page from a client on the same machine: the
server's own time plus one loopback round trip.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

import asyncpg
import httpx

from tests.conftest import PgTarget
from tests.ui.server import UiServer

# Per mille of the rows in each status (what is left over succeeded too), eight queues,
# seventeen actors, five fairness keys, one row every 200 ms back from now.
SEED = """
INSERT INTO {schema}.jobs (
    id, actor, queue, payload, status, priority, scheduled_at, created_at, updated_at,
    attempt, started_at, finished_at, locked_by_worker, lock_expires_at, error_class,
    error_message, error_traceback, fairness_key)
SELECT gen_random_uuid(), 'actor_' || (g % 17), 'queue_' || (g % 8), jsonb_build_object('n', g),
       s.status::{schema}.job_status, (g % 3) * 5,
       CASE WHEN s.status = 'scheduled' THEN t.now + interval '1 hour' ELSE t.created END,
       t.created, t.created,
       CASE WHEN s.status IN ('pending', 'scheduled') THEN 0 ELSE 1 END,
       CASE WHEN s.status NOT IN ('pending', 'scheduled') THEN t.created + interval '1 second' END,
       CASE WHEN s.status NOT IN ('pending', 'scheduled', 'running')
            THEN t.created + interval '2 seconds' END,
       CASE WHEN s.status = 'running'
            THEN ('00000000-0000-4000-8000-00000000000' || (g % 4))::uuid END,
       CASE WHEN s.status = 'running' THEN t.now + interval '30 seconds' END,
       CASE WHEN s.status IN ('failed', 'crashed') THEN 'ValueError' END,
       CASE WHEN s.status IN ('failed', 'crashed') THEN 'boom ' || g END,
       CASE WHEN s.status IN ('failed', 'crashed')
            THEN 'Traceback (most recent call last):' || chr(10) || 'ValueError: boom ' || g END,
       'tenant_' || (g % 5)
FROM generate_series(1, {rows}) AS g
CROSS JOIN LATERAL (
    SELECT CASE
        WHEN g % 1000 < 700 THEN 'succeeded' WHEN g % 1000 < 780 THEN 'failed'
        WHEN g % 1000 < 800 THEN 'cancelled' WHEN g % 1000 < 805 THEN 'crashed'
        WHEN g % 1000 < 806 THEN 'abandoned' WHEN g % 1000 < 900 THEN 'pending'
        WHEN g % 1000 < 950 THEN 'scheduled' WHEN g % 1000 < 952 THEN 'running'
        ELSE 'succeeded' END AS status
) s
CROSS JOIN LATERAL (
    SELECT clock_timestamp() AS now, clock_timestamp() - g * interval '200 milliseconds' AS created
) t;
INSERT INTO {schema}.workers (id, hostname, pid, worker_label, queues, actors, concurrency)
SELECT ('00000000-0000-4000-8000-00000000000' || n)::uuid, 'node-' || n, 1000 + n,
       'worker-' || n, ARRAY['queue_' || n], ARRAY['actor_' || n], 500
FROM generate_series(0, 3) AS n;
INSERT INTO {schema}.maintenance_leader (name, worker_id)
VALUES ('maintenance', '00000000-0000-4000-8000-000000000000');
INSERT INTO {schema}.queues (name, paused) VALUES ('queue_7', true);
"""
# The pages of the figure. The jobs page's filter narrows to one queue's failures, what an
# operator opens from an alert.
PAGES: tuple[tuple[str, str], ...] = (
    ("overview", "/"),
    ("queues", "/queues"),
    ("jobs: failed of queue_3", "/jobs?status=failed&queue=queue_3"),
)
ROWS = 1_000_000
SAMPLES = 30
WARM_UP = 3
# The goal the issue sets for each of these renders.
GOAL_MS = 100.0


async def seed_big_table(dsn: str, schema: str, rows: int) -> None:
    """Fill ``schema`` (migrated, empty) with ``rows`` jobs and the fleet, then VACUUM
    ANALYZE so the planner and the visibility map see the table as a settled one."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SEED.replace("{schema}", schema).replace("{rows}", str(rows)))
        await conn.execute(f"VACUUM ANALYZE {schema}.jobs")
    finally:
        await conn.close()


@dataclass(frozen=True)
class PageFigure:
    """Request times of one page, in milliseconds."""

    name: str
    path: str
    millis: list[float]

    @property
    def best(self) -> float:
        return min(self.millis)

    @property
    def p50(self) -> float:
        return statistics.median(self.millis)

    @property
    def p95(self) -> float:
        return statistics.quantiles(self.millis, n=20)[18]

    @property
    def worst(self) -> float:
        return max(self.millis)


async def time_pages(url: str, samples: int = SAMPLES) -> list[PageFigure]:
    """Each page ``samples`` times after a warm-up, one request at a time, round robin (so a
    burst of load on a shared machine spreads over all of them)."""
    millis: dict[str, list[float]] = {path: [] for _, path in PAGES}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for round_ in range(WARM_UP + samples):
            for _, path in PAGES:
                started = time.perf_counter()
                response = await client.get(path)
                spent = (time.perf_counter() - started) * 1000
                response.raise_for_status()
                if round_ >= WARM_UP:
                    millis[path].append(spent)
    return [PageFigure(name, path, millis[path]) for name, path in PAGES]


async def measure(dsn: str, schema: str, rows: int = ROWS) -> tuple[float, list[PageFigure]]:
    """Seed ``schema`` with ``rows`` jobs, serve it, time the pages: (seconds the seed took,
    the figures)."""
    started = time.perf_counter()
    await seed_big_table(dsn, schema, rows)
    seeded = time.perf_counter() - started
    target = PgTarget(dsn, schema)
    server = UiServer.start(target, TASKQ_LOG_LEVEL="WARNING")
    try:
        await asyncio.to_thread(server.wait_ready)
        return seeded, await time_pages(server.url)
    finally:
        server.stop()
