"""Screenshots of the admin web UI for the docs (``docs/ui-*.png``, 1280x800).

Seeds a demo schema (the dashboard state of tests/tui/seed.py: four queues, a leader, a busy
worker and a silent one, failures with tracebacks, a paused queue; two batches on queues of
their own), spreads its finished jobs over the last twenty minutes so the throughput has a
history, serves it with a real ``taskq ui serve`` and photographs each page in Debian's
Chromium (installed with apt-get when missing and run as root). The schema is dropped
afterwards.

    .venv/bin/python scripts/ui_screenshots.py [--dsn DSN] [--out docs]

Without ``--dsn`` (or TASKQ_TEST_DSN) an embedded PostgreSQL runs in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path
from uuid import uuid4

import asyncpg
from playwright.async_api import async_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from taskq_core import embedded  # noqa: E402
from taskq_core.backend.postgres.backend import PostgresBackend  # noqa: E402
from taskq_core.backend.postgres.migrate import migrate_up  # noqa: E402
from tests.batch_seed import make_batch, settle_child  # noqa: E402
from tests.conftest import PgTarget  # noqa: E402
from tests.tui.seed import seed_dashboard  # noqa: E402
from tests.ui.chromium import find_chromium, launch_args  # noqa: E402
from tests.ui.server import UiServer  # noqa: E402

VIEWPORT = {"width": 1280, "height": 800}

# The history the seed wrote in one go, moved back in time as twenty minutes of traffic,
# busier lately: each finished job (its attempts and events with it) in the order it
# finished, the waiting ones as if enqueued over the last fifteen minutes; the silent
# worker quiet for three minutes and the stopped one gone ten minutes ago; the leader
# serves the batches' queues too.
SPREAD = """
CREATE TEMP TABLE shift ON COMMIT DROP AS
SELECT id, now() - power((total - n)::float / total, 1.6) * interval '20 minutes'
           - (n % 5) * interval '7 seconds' - finished_at AS delta,
       interval '1 second' * (1 + n % 4) AS run, interval '1 second' * (n % 3) AS wait
FROM (SELECT id, finished_at, row_number() OVER (ORDER BY finished_at, id) AS n,
             count(*) OVER () AS total
      FROM {schema}.jobs WHERE finished_at IS NOT NULL) ranked
UNION ALL
SELECT id, now() - (total - n) * interval '15 minutes' / total - created_at,
       interval '0', interval '0'
FROM (SELECT id, created_at, row_number() OVER (ORDER BY created_at, id) AS n,
             count(*) OVER () AS total
      FROM {schema}.jobs WHERE status = 'pending') ranked;
UPDATE {schema}.jobs j
SET created_at = created_at + s.delta - s.run - s.wait,
    scheduled_at = scheduled_at + s.delta - s.run - s.wait,
    claimed_at = claimed_at + s.delta - s.run, started_at = started_at + s.delta - s.run,
    finished_at = finished_at + s.delta, updated_at = updated_at + s.delta
FROM shift s WHERE j.id = s.id;
UPDATE {schema}.job_attempts a
SET started_at = started_at + s.delta - s.run, finished_at = finished_at + s.delta
FROM shift s WHERE a.job_id = s.id;
UPDATE {schema}.job_events e SET occurred_at = occurred_at + s.delta
FROM shift s WHERE e.job_id = s.id;
UPDATE {schema}.workers SET queues = queues || ARRAY['albums', 'thumbnails']
WHERE worker_label = 'media-1';
UPDATE {schema}.workers SET last_seen_at = now() - interval '3 minutes'
WHERE worker_label = 'reports-1';
UPDATE {schema}.workers SET last_seen_at = now() - interval '10 minutes',
    stopped_at = now() - interval '10 minutes'
WHERE worker_label = 'reports-0';
"""


async def seed(backend: PostgresBackend, dsn: str) -> dict[str, str]:
    """Write the demo state; the paths of the pages to photograph, by file name. The
    backend holds the leadership the seed took: keep it open while photographing."""
    seeded = await seed_dashboard(backend)
    album = await make_batch(backend, queue="albums", size=40, finalizer="publish_album")
    for n in range(26):
        await settle_child(backend, album, "failed" if n % 9 == 4 else "succeeded")
    thumbnails = await make_batch(backend, queue="thumbnails", size=12, finalizer=None)
    for _ in range(3):
        await settle_child(backend, thumbnails, "succeeded")
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(SPREAD.replace("{schema}", backend.schema))
    finally:
        await conn.close()
    return {
        "ui-overview.png": "/",
        "ui-queues.png": "/queues",
        "ui-jobs.png": "/jobs?status=failed",
        "ui-job.png": f"/jobs/{seeded.failed[0].id}",
        "ui-batches.png": "/batches",
    }


async def photograph(url: str, pages: dict[str, str], out: Path) -> None:
    """Each page at 1280x800, once its first render and scripts have settled."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=find_chromium(install=True), args=launch_args()
        )
        try:
            context = await browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
            page = await context.new_page()
            for name, path in pages.items():
                response = await page.goto(url + path, wait_until="networkidle")
                assert response is not None and response.ok, f"{path}: {response}"
                await page.screenshot(path=str(out / name))
                print(f"wrote {out / name}")
        finally:
            await browser.close()


async def run(dsn: str, out: Path) -> None:
    schema = f"ui_demo_{uuid4().hex[:8]}"
    conn = await asyncpg.connect(dsn)
    try:
        await migrate_up(conn, schema)
    finally:
        await conn.close()
    try:
        server = UiServer.start(PgTarget(dsn, schema), TASKQ_LOG_LEVEL="WARNING")
        backend = await PostgresBackend.connect(dsn, schema, max_size=3)
        try:
            pages = await seed(backend, dsn)
            await asyncio.to_thread(server.wait_ready)
            await photograph(server.url, pages, out)
        finally:
            await backend.close()
            server.stop()
    finally:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        finally:
            await conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", default=os.environ.get("TASKQ_TEST_DSN"))
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    options = parser.parse_args(argv)
    if options.dsn:
        asyncio.run(run(options.dsn, options.out))
        return 0
    root = Path(tempfile.mkdtemp(prefix="taskq-screenshots-"))
    try:
        asyncio.run(run(embedded.ensure_server(root / "pgdata"), options.out))
    finally:
        embedded.stop(root / "pgdata")
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
