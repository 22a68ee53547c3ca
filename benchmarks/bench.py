"""Backend benchmark: what one PostgresBackend sustains on this machine (``make bench``).

Starts a throwaway embedded PostgreSQL in a temporary directory (or uses TASKQ_BENCH_DSN),
gives every section a freshly migrated schema, and prints one table of jobs/s. A section is
an async function taking a Bench and returning Measurements; add one to SECTIONS (a worker
drain section slots in the same way).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import asyncpg
from rich.console import Console
from rich.table import Table

from taskq_core import embedded
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.migrate import migrate_up
from taskq_core.backend.protocol import EnqueueArgs, Success
from taskq_core.obs.logs import configure_logging

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from benchmarks import (
    archive_sections,
    batch_sections,
    cost_report,
    pgbouncer_sections,
    telemetry_sections,
    ui_sections,
    workflow_sections,
)
from benchmarks.batch_sections import BatchFigures
from benchmarks.cost_report import PhaseCost, WalShare
from benchmarks.pgbouncer_sections import PoolerFigures
from benchmarks.ratelimit_sections import RATE, ROUNDS, WORKERS, LimitFigures, measure
from benchmarks.telemetry_sections import TelemetryFigures
from benchmarks.ui_sections import PageFigure
from benchmarks.worker_sections import Latency, drain, latency, lateness
from benchmarks.workflow_sections import WorkflowFigures

LEASE = timedelta(minutes=5)


@dataclass(frozen=True)
class Measurement:
    """One row of the result table."""

    section: str
    name: str
    jobs: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Bench:
    """What a section gets: the server, the sizes, and fresh backends on demand."""

    dsn: str
    quick: bool
    concurrency: int

    def size(self, full: int) -> int:
        """``full`` normally, a tenth of it with --quick (smoke runs)."""
        return max(full // 10, 10) if self.quick else full

    @asynccontextmanager
    async def fresh_backend(self, **options: Any) -> AsyncIterator[PostgresBackend]:
        """A PostgresBackend on a newly migrated schema, dropped afterwards."""
        schema = f"bench_{uuid4().hex[:12]}"
        conn = await asyncpg.connect(self.dsn)
        try:
            await migrate_up(conn, schema)
        finally:
            await conn.close()
        backend = await PostgresBackend.connect(self.dsn, schema, **options)
        try:
            yield backend
        finally:
            await backend.close()
            conn = await asyncpg.connect(self.dsn)
            try:
                await conn.execute(f"DROP SCHEMA {schema} CASCADE")
            finally:
                await conn.close()

    async def settle(self, backend: PostgresBackend) -> None:
        """VACUUM ANALYZE + CHECKPOINT after a bulk load, as the peer harness does."""
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(f"VACUUM ANALYZE {backend.schema}.jobs")
            await conn.execute("CHECKPOINT")
        finally:
            await conn.close()


def job(n: int) -> EnqueueArgs:
    """A no-op job, as the peers' benchmarks enqueue."""
    return EnqueueArgs(actor="noop", payload={"n": n})


async def enqueue_section(bench: Bench) -> list[Measurement]:
    """Enqueue throughput: one at a time, batches of 1,000 (rows returned), one COPY of all."""
    results = []
    async with bench.fresh_backend() as backend:
        count = bench.size(2_000)
        started = time.perf_counter()
        for n in range(count):
            await backend.enqueue(job(n))
        results.append(Measurement("enqueue", "single (sequential)", count, elapsed(started)))

        count = bench.size(30_000)
        started = time.perf_counter()
        for first in range(0, count, 1_000):
            await backend.enqueue_batch([job(n) for n in range(first, first + 1_000)])
        results.append(
            Measurement("enqueue", "enqueue_batch (1,000 per batch)", count, elapsed(started))
        )

        count = bench.size(50_000)
        items = [job(n) for n in range(count)]
        started = time.perf_counter()
        await backend.enqueue_batch_fast(items)
        results.append(Measurement("enqueue", "enqueue_batch_fast (COPY)", count, elapsed(started)))
    return results


async def cycle_loop(backend: PostgresBackend, batch: int, duration: float) -> int:
    """One worker's raw cycle until ``duration`` passes or the queue is empty; jobs done."""
    worker, done = uuid4(), 0
    deadline = time.perf_counter() + duration
    while time.perf_counter() < deadline:
        rows = await backend.dispatch_batch(worker, ["default"], batch, LEASE)
        if not rows:
            # Another loop may hold the head rows for a moment; stop only when none are left.
            if not await backend.count_pending_jobs(["noop"]):
                break
            continue
        await backend.mark_succeeded_many(
            worker, [Success(row.id, row.attempt, None) for row in rows]
        )
        done += len(rows)
    return done


async def cycle_section(bench: Bench) -> list[Measurement]:
    """The raw queue cycle: dispatch_batch, then one mark_succeeded_many for the batch, from
    ``concurrency`` loops at once, for a fixed time per batch size."""
    results = []
    duration = 1.0 if bench.quick else 5.0
    for batch in (1, 10, 100):
        async with bench.fresh_backend(max_size=bench.concurrency * 4) as backend:
            await backend.enqueue_batch_fast([job(n) for n in range(bench.size(60_000))])
            await bench.settle(backend)
            started = time.perf_counter()
            counts = await asyncio.gather(
                *(cycle_loop(backend, batch, duration) for _ in range(bench.concurrency))
            )
            name = f"dispatch + complete, batch {batch} ({bench.concurrency} loops)"
            results.append(Measurement("cycle", name, sum(counts), elapsed(started)))
    return results


async def drain_section(bench: Bench) -> list[Measurement]:
    """A real `taskq worker` process (concurrency 16, then 1) draining no-op jobs."""
    results = []
    for concurrency, full in ((16, 20_000), (1, 2_000)):
        async with bench.fresh_backend() as backend:
            count = bench.size(full)
            seconds, code = await drain(backend, bench.dsn, count, concurrency)
            name = f"worker drain, concurrency {concurrency}" + (
                "" if code == 0 else f" (exit {code})"
            )
            results.append(Measurement("drain", name, count, seconds))
    return results


LATENCIES: list[Latency] = []


async def latency_section(bench: Bench) -> list[Measurement]:
    """Enqueue->start latency into an idle worker (reported in its own table)."""
    async with bench.fresh_backend() as backend:
        LATENCIES.append(await latency(backend, bench.dsn, bench.size(500)))
    return []


LATENESS: list[tuple[int, tuple[float, float, float]]] = []


async def scheduled_section(bench: Bench) -> list[Measurement]:
    """Scheduled jobs started on time (reported in its own line)."""
    samples = bench.size(1_000)
    async with bench.fresh_backend() as backend:
        LATENESS.append((samples, await lateness(backend, bench.dsn, samples)))
    return []


COSTS: list[list[PhaseCost]] = []


async def cost_section(bench: Bench) -> list[Measurement]:
    """What one no-op job costs the database, phase by phase (its own table)."""
    async with bench.fresh_backend() as backend:
        COSTS.append(await cost_report.measure(backend, bench.dsn, bench.size(10_000)))
    return []


def render_costs(costs: list[PhaseCost]) -> Table:
    table = Table(title="What one no-op job costs, per job (WAL counts the whole server)")
    for name in ("phase", "jobs", "WAL bytes", "commits", "inserted", "updated", "HOT",
                 "deleted", "worker CPU us"):  # fmt: skip
        table.add_column(name, justify="left" if name == "phase" else "right")
    for c in costs:
        cpu = "" if c.worker_cpu_us is None else f"{c.worker_cpu_us:.0f}"
        table.add_row(
            c.phase, f"{c.jobs:,}", f"{c.wal_bytes:,.0f}", f"{c.commits:.3f}",
            f"{c.inserted:.2f}", f"{c.updated:.2f}", f"{c.hot_updated:.2f}",
            f"{c.deleted:.2f}", cpu,
        )  # fmt: skip
    return table


def render_wal_shares(phase: str, shares: tuple[WalShare, ...], rows: int = 16) -> Table:
    table = Table(title=f"{phase}: WAL per job by relation and record (pg_walinspect)")
    for name in ("relation", "record", "bytes", "records"):
        table.add_column(name, justify="left" if name in ("relation", "record") else "right")
    for share in shares[:rows]:
        table.add_row(share.relation, share.record, f"{share.bytes:,.0f}", f"{share.records:.2f}")
    rest = shares[rows:]
    if rest:
        table.add_row(
            f"{len(rest)} more", "", f"{sum(s.bytes for s in rest):,.0f}",
            f"{sum(s.records for s in rest):.2f}",
        )  # fmt: skip
    return table


LIMITS: list[LimitFigures] = []


async def ratelimit_section(bench: Bench) -> list[Measurement]:
    """A 100/s TokenBucket over 4 workers for a minute, and unlimited jobs beside it (the
    median of ROUNDS drains on each side, alternating)."""
    figures = await measure(
        bench.fresh_backend,
        bench.dsn,
        unlimited=bench.size(20_000),
        window=10.0 if bench.quick else 60.0,
        rounds=1 if bench.quick else ROUNDS,
    )
    LIMITS.append(figures)
    return [
        Measurement(
            "ratelimit",
            f"unlimited actor alone ({WORKERS} workers)",
            figures.unlimited_jobs,
            figures.unlimited_alone,
        ),
        Measurement(
            "ratelimit",
            f"unlimited actor beside a {RATE:g}/s bucket's backlog",
            figures.unlimited_jobs,
            figures.unlimited_beside,
        ),
        Measurement(
            "ratelimit",
            f"limited actor, {RATE:g}/s bucket over {figures.window:g} s",
            figures.limited_starts,
            figures.window,
        ),
    ]


BATCHES: list[BatchFigures] = []


async def batches_section(bench: Bench) -> list[Measurement]:
    """A 50,000-child batch with a finalizer against 50,000 plain jobs, one worker process
    (concurrency 16) each, five paired rounds (medians: a shared machine varies by a fifth
    between drains)."""
    figures = await batch_sections.measure(
        bench.fresh_backend, bench.settle, bench.dsn, bench.size(50_000), 1 if bench.quick else 5
    )
    BATCHES.append(figures)
    concurrency = batch_sections.CONCURRENCY
    failed = "" if set(figures.exit_codes) == {0} else f" (exits {figures.exit_codes})"
    return [
        Measurement(
            "batches", f"plain jobs, concurrency {concurrency}", figures.jobs, figures.plain
        ),
        Measurement(
            "batches",
            f"batch children + finalizer, concurrency {concurrency}{failed}",
            figures.jobs,
            figures.batch,
        ),
    ]


POOLERS: list[PoolerFigures] = []


async def pgbouncer_section(bench: Bench) -> list[Measurement]:
    """A worker's drain (concurrency 16) and single enqueues with the pooled DSN direct, on
    the server without a statement cache, and through PgBouncer, in alternating rounds."""
    figures = await pgbouncer_sections.measure(
        bench.fresh_backend,
        bench.settle,
        bench.dsn,
        jobs=bench.size(20_000),
        enqueues=bench.size(2_000),
        rounds=1 if bench.quick else 2,
    )
    POOLERS.append(figures)
    failed = "" if figures.exit_codes == {0} else f" (exits {sorted(figures.exit_codes)})"
    concurrency = pgbouncer_sections.CONCURRENCY
    return [
        *(
            Measurement(
                "pgbouncer",
                f"worker drain, concurrency {concurrency}, pooled DSN {variant}{failed}",
                figures.jobs,
                figures.drain[variant],
            )
            for variant in pgbouncer_sections.VARIANTS
        ),
        *(
            Measurement(
                "pgbouncer",
                f"single enqueues, pooled DSN {variant}",
                figures.enqueues,
                figures.enqueue[variant],
            )
            for variant in pgbouncer_sections.VARIANTS
        ),
    ]


UI_PAGES: list[tuple[int, float, list[PageFigure]]] = []


async def ui_section(bench: Bench) -> list[Measurement]:
    """The admin UI's overview, queues and a filtered jobs page on a real `taskq ui serve`
    over 1,000,000 jobs (reported in its own table)."""
    rows = bench.size(ui_sections.ROWS)
    async with bench.fresh_backend() as backend:
        seeded, figures = await ui_sections.measure(bench.dsn, backend.schema, rows)
    UI_PAGES.append((rows, seeded, figures))
    return []


TELEMETRY: list[TelemetryFigures] = []


async def telemetry_section(bench: Bench) -> list[Measurement]:
    """A worker's drain (concurrency 16) with no SDK, with the /metrics meters, and exporting
    traces and metrics over OTLP/HTTP to a local receiver (all traces, then 10% sampled), in
    five rounds, the order rotated every round (medians)."""
    figures = await telemetry_sections.measure(
        bench.fresh_backend,
        bench.settle,
        bench.dsn,
        jobs=bench.size(20_000),
        rounds=1 if bench.quick else 5,
    )
    TELEMETRY.append(figures)
    failed = "" if figures.exit_codes == {0} else f" (exits {sorted(figures.exit_codes)})"
    concurrency = telemetry_sections.CONCURRENCY
    return [
        Measurement(
            "telemetry",
            f"worker drain, concurrency {concurrency}, {variant}{failed}",
            figures.jobs,
            figures.seconds(variant),
        )
        for variant in telemetry_sections.VARIANTS
    ]


WORKFLOWS: list[WorkflowFigures] = []


async def workflows_section(bench: Bench) -> list[Measurement]:
    """enqueue_workflow of 10,000 steps (a fan-out; 100 chains of 100), and a worker
    (concurrency 16) draining the fan-out against 10,000 plain jobs, medians of three
    alternating rounds."""
    figures = await workflow_sections.measure(
        bench.fresh_backend, bench.settle, bench.dsn, bench.size(10_000), 1 if bench.quick else 3
    )
    WORKFLOWS.append(figures)
    steps, median = figures.steps, figures.median
    failed = "" if set(figures.exit_codes) == {0} else f" (exits {figures.exit_codes})"
    concurrency = workflow_sections.CONCURRENCY
    return [
        *(
            Measurement("workflows", f"enqueue_workflow, {shape}", steps, median(seconds))
            for shape, seconds in figures.enqueue.items()
        ),
        Measurement(
            "workflows", f"plain jobs, concurrency {concurrency}", steps, median(figures.plain)
        ),
        Measurement(
            "workflows",
            f"workflow root -> {steps - 2:,} -> join, concurrency {concurrency}{failed}",
            steps,
            median(figures.workflow),
        ),
    ]


ARCHIVE: list[list[archive_sections.ExpiryFigure]] = []


async def archive_section(bench: Bench) -> list[Measurement]:
    """The archive expiry of 1,000,000 archived jobs of an ended day: its partitions dropped
    against its rows deleted in batches from the default partition (its own lines)."""
    figures = await archive_sections.measure(bench.fresh_backend, bench.dsn, bench.size(1_000_000))
    ARCHIVE.append(figures)
    return [Measurement("archive", f"expiry, {f.way}", f.jobs, f.seconds) for f in figures]


Section = Callable[[Bench], Awaitable[list[Measurement]]]
SECTIONS: list[tuple[str, Section]] = [
    ("enqueue", enqueue_section),
    ("cycle", cycle_section),
    ("drain", drain_section),
    ("latency", latency_section),
    ("scheduled", scheduled_section),
    ("cost", cost_section),
    ("ratelimit", ratelimit_section),
    ("batches", batches_section),
    ("pgbouncer", pgbouncer_section),
    ("telemetry", telemetry_section),
    ("ui", ui_section),
    ("workflows", workflows_section),
    ("archive", archive_section),
]


def print_workflows(console: Console, flow: WorkflowFigures) -> None:
    median, rounds = flow.median, len(flow.workflow)
    shapes = ", ".join(f"{shape} {median(s):.2f} s" for shape, s in flow.enqueue.items())
    console.print(
        f"workflows: {flow.steps:,} steps enqueued in {shapes} (median of {rounds}; building "
        f"the Workflow {median(flow.build):.2f} s more)"
    )
    for label, plain, workflow in (
        ("from the worker's start", flow.plain, flow.workflow),
        ("first claim to last finish", flow.plain_span, flow.workflow_span),
    ):
        console.print(
            f"  drain, {label}: the workflow at {flow.ratio(plain, workflow):.1%} of the plain "
            f"rate ({flow.steps / median(workflow):,.0f}/s against "
            f"{flow.steps / median(plain):,.0f}/s; rounds "
            + " / ".join(f"{flow.steps / s:,.0f}" for s in workflow)
            + " against "
            + " / ".join(f"{flow.steps / s:,.0f}" for s in plain)
            + ")"
        )
    load = " / ".join(f"{x:.2f}" for x in flow.load)
    console.print(f"  load average {load}" + "".join(f"; {f}" for f in flow.failures))


def elapsed(started: float) -> float:
    return time.perf_counter() - started


def render(measurements: list[Measurement], where: str) -> Table:
    table = Table(title=f"TaskQ backend benchmark ({where})")
    table.add_column("section")
    table.add_column("measurement")
    table.add_column("jobs", justify="right")
    table.add_column("seconds", justify="right")
    table.add_column("jobs/s", justify="right")
    for m in measurements:
        table.add_row(m.section, m.name, f"{m.jobs:,}", f"{m.seconds:.2f}", f"{m.rate:,.0f}")
    return table


async def run(bench: Bench, only: list[str]) -> list[Measurement]:
    measurements: list[Measurement] = []
    for name, section in SECTIONS:
        if not only or name in only:
            measurements.extend(await section(bench))
    return measurements


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes (smoke run)")
    parser.add_argument("--concurrency", type=int, default=4, help="cycle loops at once")
    parser.add_argument(
        "--section", action="append", default=[], choices=[name for name, _ in SECTIONS]
    )
    options = parser.parse_args(argv)
    configure_logging(level="WARNING")
    console = Console()
    given = os.environ.get("TASKQ_BENCH_DSN")
    root = None if given else Path(tempfile.mkdtemp(prefix="taskq-bench-"))
    try:
        if root is not None:
            console.print("[dim]starting an embedded PostgreSQL for the benchmark...[/dim]")
            dsn = embedded.ensure_server(root / "pgdata")
            where = "embedded PostgreSQL, default settings"
        else:
            assert given is not None
            dsn, where = given, "TASKQ_BENCH_DSN"
        bench = Bench(dsn=dsn, quick=options.quick, concurrency=options.concurrency)
        measurements = asyncio.run(run(bench, options.section))
        console.print(render(measurements, where))
        for result in LATENCIES:
            console.print(
                f"enqueue->start latency, idle worker, {result.samples} jobs 5 ms apart "
                "(p50 / p95 / p99 ms):"
            )
            for name, cuts in (
                ("enqueue call -> start", result.total),
                ("  the enqueue's INSERT + commit", result.commit),
                ("  commit -> start (NOTIFY, claim)", result.after_commit),
            ):
                console.print(f"  {name:<36} " + " / ".join(f"{cut:.2f}" for cut in cuts))
        for costs in COSTS:
            console.print(render_costs(costs))
            for cost in costs:
                if cost.wal_shares:
                    console.print(render_wal_shares(cost.phase, cost.wal_shares))
        for samples, cuts in LATENESS:
            console.print(
                f"scheduled jobs: {samples} due over 3 s, start past run_at (p50 / p95 / p99 "
                "ms): " + " / ".join(f"{cut:.1f}" for cut in cuts)
            )
        for limit in LIMITS:
            console.print(
                f"rate limit: {limit.limited_rate:.1f}/s against {RATE:g}/s "
                f"({limit.limited_rate / RATE - 1:+.1%}) over {limit.window:g} s, at most "
                f"{limit.peak_second} starts in one second; unlimited jobs drained at "
                f"{limit.unlimited_kept:.0%} of their rate alone"
            )
        for batch in BATCHES:
            console.print(
                f"batches: {batch.jobs:,} children with a finalizer drained at "
                f"{batch.ratio:.1%} of the rate of as many plain jobs, the median of "
                f"{len(batch.rounds)} paired rounds ("
                + " / ".join(f"{ratio:.1%}" for ratio in batch.ratios)
                + f"; median drains {batch.jobs / batch.batch:,.0f}/s against "
                f"{batch.jobs / batch.plain:,.0f}/s); the worker's event loop thread "
                f"{_micros(batch.loop_cpu(True))} a child against "
                f"{_micros(batch.loop_cpu(False))} a plain job (medians, from its registration)"
            )
        for flow in WORKFLOWS:
            print_workflows(console, flow)
        for pooler in POOLERS:
            direct = pooler.jobs / pooler.drain["direct"]
            through = pooler.jobs / pooler.drain["through PgBouncer"]
            console.print(
                f"pgbouncer: a worker whose pooled DSN goes through PgBouncer drained at "
                f"{through / direct:.0%} of the direct rate ({through:,.0f}/s against "
                f"{direct:,.0f}/s)"
            )
        for rows, seeded, figures in UI_PAGES:
            console.print(
                f"admin UI over {rows:,} jobs (seeded in {seeded:.0f} s), request time on "
                f"loopback, {ui_sections.SAMPLES} requests each (best / p50 / p95 / max ms, goal "
                f"{ui_sections.GOAL_MS:g} ms):"
            )
            for page in figures:
                console.print(
                    f"  {page.name:<26} {page.best:7.1f} / {page.p50:7.1f} / {page.p95:7.1f} / "
                    f"{page.worst:7.1f}"
                )
            console.print(f"  load average: {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
        for figures in ARCHIVE:
            for line in archive_sections.describe(figures):
                console.print(line)
        for otel in TELEMETRY:
            off, meters, on, sampled = telemetry_sections.VARIANTS
            console.print(
                f"telemetry (medians of {len(otel.rounds)} rounds' own shares): exporting over "
                f"OTLP drained at {otel.share(on, meters):.0%} of the rate without an exporter "
                f"and {otel.share(on, off):.0%} of no SDK ({otel.rate(on):,.0f}/s against "
                f"{otel.rate(meters):,.0f}/s and {otel.rate(off):,.0f}/s); "
                f"{otel.share(sampled, meters):.0%} and {otel.share(sampled, off):.0%} with 10% "
                f"of traces sampled ({otel.requests} requests received); the /metrics meters "
                f"alone at {otel.share(meters, off):.0%} of no SDK; every span, per round: "
                + " / ".join(f"{share:.0%}" for share in otel.round_shares(on, off))
                + f" of no SDK; load average {' / '.join(f'{x:.2f}' for x in otel.load)}; "
                "the worker's event loop thread a job: "
                + ", ".join(f"{v} {_micros(otel.cpu_part(v, 'loop'))}" for v in (off, meters))
                + f", {on} {_micros(otel.cpu_part(on, 'loop'))} (its exporter process "
                f"{_micros(otel.cpu_part(on, 'children'))}), 10% sampled "
                f"{_micros(otel.cpu_part(sampled, 'loop'))}"
            )
    finally:
        if root is not None:
            embedded.stop(root / "pgdata")
            shutil.rmtree(root, ignore_errors=True)
    return 0


def _micros(figure: float | None) -> str:
    """Microseconds a job as the summaries print them ("?" when no round had a figure)."""
    return "?" if figure is None else f"{figure:.1f} µs"


if __name__ == "__main__":
    sys.exit(main())
