"""What every scenario shares: its schema, processes, waits, and the invariants checked at the end.

A scenario injects its fault through a ``Harness``, then calls ``finish``: a bounded wait for
every job to become terminal, then the common invariants, read from the database and the
marker file. Checks never raise: each one is recorded with its evidence, so the report shows
every invariant that failed, not only the first.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from chaos.actors import NEVER_FAIL
from chaos.db import Probe, prepare_schema
from chaos.markers import ENV_VAR, Markers
from chaos.pgserver import PrivateServer
from chaos.procs import TERMINATION_GRACE, WORKER_SETTINGS, Fleet, Proc, pid_alive
from taskq_core.actors import ActorRef
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.client import EnqueueItem, JobsClient

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Check:
    """One invariant's verdict. ``timed`` ones compare a measured time against a bound."""

    name: str
    ok: bool
    detail: str = ""
    timed: bool = False


@dataclass
class ScenarioResult:
    """What one scenario measured and concluded."""

    name: str
    jobs: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    completed_twice: int | None = None
    crashed_without_body: int | None = None
    recover_first: float | None = None
    recover_drain: float | None = None
    failed_by_cause: list[str] = field(default_factory=list)  # FailureCause.describe() lines
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None
    elapsed: float = 0.0

    @property
    def passed(self) -> bool:
        return self.skipped is None and all(c.ok for c in self.checks)

    def failures(self, *, timed: bool = True) -> list[Check]:
        return [c for c in self.checks if not c.ok and (timed or not c.timed)]


class Harness:
    """One scenario's world: a fresh schema on the private server, its processes and probe."""

    def __init__(
        self, server: PrivateServer, schema: str, directory: Path, result: ScenarioResult
    ) -> None:
        self.server = server
        self.dsn = server.dsn
        self.schema = schema
        self.directory = directory
        self.result = result
        self.markers_path = directory / "markers.txt"
        self.random = random.Random(f"chaos-{result.name}")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")},
            **WORKER_SETTINGS,
            "TASKQ_PG_DSN": self.dsn,
            "TASKQ_SCHEMA_NAME": schema,
            ENV_VAR: str(self.markers_path),
            "NO_COLOR": "1",
        }
        self.fleet = Fleet(directory, env)
        self.probe = Probe(self.dsn, schema)
        # A scenario may name groups of its jobs (its phases): the checks count per group.
        self.job_groups: dict[UUID, str] = {}

    async def open(self) -> None:
        await prepare_schema(self.dsn, self.schema)
        self.markers_path.touch()

    async def close(self) -> None:
        await self.fleet.close()
        await self.probe.close()

    # --- recording ---------------------------------------------------------------------------
    def check(self, name: str, ok: bool, detail: str = "", *, timed: bool = False) -> bool:
        self.result.checks.append(Check(name, bool(ok), detail, timed))
        return bool(ok)

    def note(self, text: str) -> None:
        self.result.notes.append(text)

    def markers(self) -> Markers:
        return Markers.read(self.markers_path)

    async def keep_evidence(self) -> None:
        """When an invariant failed, copy the scenario's tables next to its logs and markers
        (the schema goes with the private server), and say where they are."""
        if self.result.passed or self.result.skipped:
            return
        written = await self.probe.dump(self.directory)
        self.note(f"evidence in {self.directory}: logs/, markers.txt, {', '.join(written)}")

    # --- jobs --------------------------------------------------------------------------------
    async def enqueue(
        self, items: list[tuple[ActorRef, dict[str, Any]]] | list[EnqueueItem]
    ) -> list[UUID]:
        """Enqueue ``items`` in one batch (with each actor's options); their ids, in order."""
        backend = await PostgresBackend.connect(self.dsn, self.schema, min_size=1, max_size=2)
        try:
            async with JobsClient(backend=backend) as client:
                rows = await client.enqueue_batch(items)
        finally:
            await backend.close()
        self.result.jobs += len(rows)
        return [row.id for row in rows]

    def durations(self, count: int, low_ms: int, high_ms: int) -> list[int]:
        """``count`` body durations, the same for every run of this scenario."""
        return [self.random.randint(low_ms, high_ms) for _ in range(count)]

    # --- waiting -----------------------------------------------------------------------------
    async def wait_for(
        self,
        check: Callable[[], Awaitable[T | None]],
        timeout: float,
        *,
        step: float = 0.1,
        give_up: Callable[[], bool] | None = None,
    ) -> T | None:
        """Poll ``check`` until it returns something truthy; None at the deadline.

        ``give_up`` ends the wait early when waiting can no longer help (every worker gone).
        """
        deadline = time.monotonic() + timeout
        while True:
            value = await check()
            if value:
                return value
            if time.monotonic() > deadline or (give_up is not None and give_up()):
                return None
            await asyncio.sleep(step)

    async def wait_until(
        self,
        check: Callable[[], T | None],
        timeout: float,
        *,
        step: float = 0.1,
        give_up: Callable[[], bool] | None = None,
    ) -> T | None:
        """``wait_for`` with a plain (not async) check."""

        async def poll() -> T | None:
            return check()

        return await self.wait_for(poll, timeout, step=step, give_up=give_up)

    async def registered(self, procs: list[Proc] | list[int], timeout: float = 30) -> bool:
        """Wait until every process (or pid) in ``procs`` has a running ``workers`` row."""
        wanted = {p if isinstance(p, int) else p.pid for p in procs}

        async def check() -> bool:
            rows = await self.probe.workers()
            return wanted <= {w.pid for w in rows or () if w.status == "running"}

        return bool(await self.wait_for(check, timeout))

    async def started_bodies(self, count: int, timeout: float) -> bool:
        """Wait until at least ``count`` bodies have started (markers, not the database)."""

        async def check() -> bool:
            return len(self.markers().of_kind("start")) >= count

        return bool(await self.wait_for(check, timeout, step=0.05))

    async def drained(self, timeout: float, *, give_up: Callable[[], bool] | None = None) -> bool:
        """Wait until no job is pending, scheduled or running."""

        async def check() -> bool:
            return await self.probe.unfinished() == 0

        return bool(await self.wait_for(check, timeout, step=0.2, give_up=give_up))

    async def note_reclaims(self, cuts: list[tuple[float, set[UUID]]], what: str) -> None:
        """Note how soon after each fault the jobs it interrupted were reclaimed.

        ``cuts`` holds, per fault, its time (epoch seconds) and the jobs whose bodies it cut.
        """
        jobs = sorted({job for _, cut in cuts for job in cut})
        events = await self.probe.reclaims(jobs) or []
        delays: list[float] = []
        for at, cut in cuts:
            for job in cut:
                after = [t for j, t in events if j == job and t >= at]
                if after:
                    delays.append(after[0] - at)
        if not jobs:
            return
        delays.sort()
        text = f"{len(delays)}/{sum(len(c) for _, c in cuts)} {what} reclaimed"
        if delays:
            text += f" {delays[len(delays) // 2]:.1f}s (median), {delays[-1]:.1f}s (max) after"
        self.note(text)

    async def worker_pids(self) -> dict[UUID, int]:
        """Worker id -> pid of every registered worker of this schema."""
        return {w.id: w.pid for w in await self.probe.workers() or ()}

    # --- the common invariants ---------------------------------------------------------------
    async def finish(
        self,
        *,
        fault_at: float | None,
        recovery: float,
        transactional: bool = False,
        expect_alive: bool = True,
    ) -> None:
        """Wait (bounded) for the drain, then check the invariants every scenario shares.

        ``fault_at`` (epoch seconds) is when the fault ended; recovery times are measured from
        it. The workers still running are stopped with SIGTERM last, and must exit 0.
        """
        live = self.fleet.alive()
        drained = await self.drained(
            recovery, give_up=(lambda: not self.fleet.alive()) if expect_alive else None
        )
        counts = await self.probe.status_counts() or {}
        self.result.outcomes = counts
        left = {s: n for s, n in counts.items() if s in ("pending", "scheduled", "running")}
        if not drained and not self.fleet.alive():
            reason = "every worker had exited, so the recovery wait stopped early"
        else:
            reason = f"after a {recovery:g}s recovery wait"
        self.check(
            "every job terminal",
            drained,
            "" if drained else f"{_counts(left)} left; {reason}",
        )
        await self._check_owners()
        await self._check_failures()
        await self._check_markers()
        if transactional:
            await self._check_effects()
        await self._recovery_times(fault_at, drained)
        died = [p for p in live if not p.alive()]
        self.check(
            "no worker exits during the recovery wait",
            not died,
            "; ".join(p.describe_exit() for p in died),
        )
        await self.stop_cleanly(self.fleet.alive())
        await self._check_bodies()

    async def stop_cleanly(self, procs: list[Proc]) -> None:
        """SIGTERM ``procs``; each must exit 0 within the termination grace (plus 5 s)."""
        if not procs:
            return
        codes = await self.fleet.stop(procs, timeout=TERMINATION_GRACE + 5)
        bad = [p.describe_exit() if c is not None else f"{p.name} hung" for p, c in codes.items()
               if c != 0]  # fmt: skip
        self.check("workers stop with exit 0 on SIGTERM", not bad, "; ".join(bad))

    async def _check_owners(self) -> None:
        running = await self.probe.running_owners()
        pids = await self.worker_pids()
        if running is None:
            self.check("no running job without a live owner", False, "database unreachable")
            return
        orphans = [job for job, owner in running if owner not in pids or not pid_alive(pids[owner])]
        self.check(
            "no running job without a live owner",
            not orphans,
            f"{len(orphans)} running job(s) owned by a dead or unknown worker, e.g. {orphans[0]}"
            if orphans
            else "",
        )

    async def _check_failures(self) -> None:
        """Every job that did not succeed, grouped by cause; none of an actor that never
        fails (a poison verdict on a healthy job, a shutdown that drops one, ...)."""
        causes = await self.probe.failure_causes()
        if causes is None:
            self.check("no job fails whose actor never fails", False, "database unreachable")
            return
        self.result.failed_by_cause = [cause.describe() for cause in causes]
        healthy = [cause for cause in causes if cause.actor in NEVER_FAIL]
        self.check(
            "no job fails whose actor never fails",
            not healthy,
            f"{sum(c.count for c in healthy)} job(s): "
            + "; ".join(cause.describe() for cause in healthy),
        )

    async def _check_markers(self) -> None:
        markers = self.markers()
        self.result.completed_twice = markers.completed_twice()
        crashed = await self.probe.crashed_attempts() or []
        started = markers.started()
        # A start written before the body, then a stop past the lease before the body was
        # called: the worker refuses the body and says so (its reclaim counts a crash).
        refused = self.starts_without_body()
        without_body = [pair for pair in crashed if pair not in started and pair not in refused]
        if accounted := [pair for pair in crashed if pair not in started and pair in refused]:
            self.note(
                f"{len(accounted)} crashed attempt(s) whose worker refused the body after "
                "writing its start (job_start_without_body)"
            )
        # A worker killed (or stopped, its last log lines unwritten) between a start it wrote
        # before the body and the body's call: the reclaim says so (start_before_body), and
        # accounts for at most one crashed attempt of the job each.
        before_body = Counter(await self.probe.starts_before_body() or {})
        unreported, left = [], []
        for pair in without_body:
            if before_body[pair[0]] > 0:
                before_body[pair[0]] -= 1
                unreported.append(pair)
            else:
                left.append(pair)
        without_body = left
        if unreported:
            self.note(
                f"{len(unreported)} crashed attempt(s) whose start was written before the "
                "body, which no log says was called (start_before_body)"
            )
        self.result.crashed_without_body = len(without_body)
        self.check(
            "no crashed attempt without its body",
            not without_body,
            f"{len(without_body)} of {len(crashed)} crashed attempt(s) never started the actor, "
            f"e.g. job {without_body[0][0]} attempt {without_body[0][1]}"
            if without_body
            else "",
        )
        if crashed:
            self.note(f"{len(crashed)} crashed attempt(s) in all")

    def starts_without_body(self) -> set[tuple[UUID, int]]:
        """(job, attempt) pairs a worker reported as started but refused at the body's call."""
        return {
            (UUID(r["job_id"]), int(r["attempt"]))
            for proc in self.fleet.procs
            for r in proc.records()
            if r.get("event") == "job_start_without_body"
        }

    async def _check_bodies(self) -> None:
        """The execution guarantee, read from the per-body ledger once every worker stopped:
        no two bodies of one job at once in one process, no body started after its job
        ended, no attempt number under two bodies (a kill may lose a body's attempt row, never
        reuse its number)."""
        markers = self.markers()
        overlaps = markers.overlapping()
        self.check(
            "no two bodies of one job at once in one worker",
            not overlaps,
            self.tally([a.job_id for a, _ in overlaps])
            + example([f"{a.describe()} and {b.describe()}" for a, b in overlaps]),
        )
        ended = await self.probe.ended_at()
        if ended is None:
            self.check("no body starts after its job ended", False, "database unreachable")
        else:
            late = markers.started_after(ended)
            self.check(
                "no body starts after its job ended",
                not late,
                self.tally([b.job_id for b, _ in late])
                + example(
                    [f"job {b.job_id} ended {at:.3f}, body {b.describe()} "
                     f"({b.started - at:.2f}s later)" for b, at in late]
                ),
            )  # fmt: skip
        reused = markers.attempts_reused()
        self.check(
            "no attempt number used by two bodies",
            not reused,
            self.tally([job for job, _ in reused])
            + example(
                [f"job {job} attempt {n}: {'; '.join(b.describe() for b in bodies)}"
                 for (job, n), bodies in reused.items()]
            ),
        )  # fmt: skip

    def tally(self, jobs: list[UUID]) -> str:
        """How many distinct jobs, per group when the scenario named groups (``job_groups``)."""
        groups: dict[str, set[UUID]] = {}
        for job in jobs:
            groups.setdefault(self.job_groups.get(job, "all"), set()).add(job)
        return ", ".join(f"{len(ids)} jobs ({name})" for name, ids in sorted(groups.items()))

    async def _check_effects(self) -> None:
        effects = await self.probe.effects() or {}
        succeeded = await self.probe.succeeded_ids("transactional") or set()
        doubled = [job for job, n in effects.items() if n > 1]
        missing = succeeded - set(effects)
        stray = set(effects) - succeeded
        self.check(
            "transactional effects exactly once",
            not doubled and not missing and not stray,
            f"{len(doubled)} job(s) with 2+ rows, {len(missing)} succeeded without its row, "
            f"{len(stray)} row(s) of jobs not succeeded",
        )
        self.note(f"transactional jobs with 2+ effect rows: {len(doubled)}")

    async def _recovery_times(self, fault_at: float | None, drained: bool) -> None:
        if fault_at is None:
            return
        successes = await self.probe.finish_times("succeeded") or []
        after = [t for t in successes if t >= fault_at]
        self.result.recover_first = after[0] - fault_at if after else None
        finishes = await self.probe.finish_times() or []
        if drained and finishes:
            self.result.recover_drain = max(0.0, finishes[-1] - fault_at)


def example(lines: list[str]) -> str:
    """``; e.g. <the first line>``, or nothing when there is none."""
    return f"; e.g. {lines[0]}" if lines else ""


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "none"
