"""Differential: the same random worker, operator and sweep operations on both backends, side
by side, must leave what a caller sees identical after every step: each call's answer, every
job's row, attempts and events, the worker rows' counts and the dashboard's counts.

The conformance files pin each rule once; this walks the combinations between them (a cancel
request on a claimed job that is then released, a stale lease after a snooze and a reclaim,
...). Timestamps are compared as "set or not", never by value: the memory clock moves a
millisecond per step, Postgres's by however long the step took.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from taskq_core import jsontext
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import (
    ActorDeclaration,
    AttemptRow,
    Backend,
    EnqueueArgs,
    ErrorInfo,
    EventRow,
    HeartbeatResult,
    JobFilter,
    JobRow,
    Lease,
    Start,
    Success,
    WorkerInfo,
)
from taskq_core.clock import FakeClock
from taskq_core.ids import uuid7
from tests.conformance.conftest import Harness
from tests.conftest import PgTarget, create_migrated_schema, drop_schema

QUEUE = "diff"
WORKERS = (UUID(int=0xA), UUID(int=0xB))
LOCK_LEASE = timedelta(seconds=30)
DELAY = timedelta(seconds=5)
# Travel steps never add up to a threshold of the operations below plus less than the
# steps' own duration, so "past" means the same thing on both clocks.
TRAVELS = (3, 7, 31, 65)
STEPS = 60
# TASKQ_DIFFERENTIAL_SEEDS="start:stop" walks more seeds (a longer hunt than CI's).
_FIRST, _LAST = (int(n) for n in os.environ.get("TASKQ_DIFFERENTIAL_SEEDS", "0:16").split(":"))
SEEDS = range(_FIRST, _LAST)


@pytest.fixture
async def pair(pg_server_dsn: str) -> AsyncIterator[tuple[Harness, Harness]]:
    """A memory and a Postgres backend, each empty."""
    clock = FakeClock()
    memory = InMemoryBackend(clock=clock)
    pg = PgTarget(pg_server_dsn, await create_migrated_schema(pg_server_dsn))
    postgres = await PostgresBackend.connect(pg.dsn, pg.schema)
    try:
        yield Harness("memory", memory, clock=clock), Harness("postgres", postgres, pg=pg)
    finally:
        await postgres.close()
        await memory.close()
        await drop_schema(pg.dsn, pg.schema)


# --- what a caller sees, without timestamps --------------------------------------------------
def _row(row: JobRow | None) -> object:
    if row is None:
        return None
    return (
        row.status.value,
        row.attempt,
        row.locked_by_worker,
        row.lock_expires_at is not None,
        row.claimed_at is not None,
        row.started_at is not None,
        row.finished_at is not None,
        row.cancel_phase,
        row.cancel_requested_at is not None,
        row.cancel_reason,
        row.error_class,
        row.error_message,
        row.result,
        row.metadata,
    )


def _attempt(attempt: AttemptRow) -> object:
    return (
        attempt.attempt,
        attempt.outcome,
        attempt.worker_id,
        attempt.started_at is not None,
        attempt.error_class,
        attempt.error_message,
    )


def _event(event: EventRow) -> object:
    return (event.kind, event.from_status, event.to_status, event.worker_id, event.detail)


def _answer(value: object) -> object:
    """A call's answer, comparable across backends."""
    if isinstance(value, JobRow):
        return _row(value)
    if isinstance(value, list) and value and isinstance(value[0], JobRow):
        return [row.id for row in value]
    if isinstance(value, HeartbeatResult):
        flags = [(f.job_id, f.cancel_phase, f.reason) for f in value.cancel_flags]
        return sorted(value.held), sorted(value.extended), flags
    if isinstance(value, set | frozenset):
        return sorted(value)
    return value


async def _seen(backend: Backend, job_ids: list[UUID]) -> object:
    """Everything the test compares after a step."""
    jobs = [
        (
            _row(await backend.get(job_id)),
            [_attempt(a) for a in await backend.get_attempts(job_id)],
            [_event(e) for e in await backend.get_events(job_id)],
        )
        for job_id in job_ids
    ]
    workers = sorted((w.id, w.running_jobs, w.claimed_jobs) for w in await backend.list_workers())
    stats = await backend.dashboard_stats(timedelta(hours=1), 1)
    queues = [(q.name, q.pending, q.scheduled, q.running, q.claimed) for q in stats.queues]
    return (
        jobs,
        workers,
        queues,
        await backend.count_jobs(JobFilter(queue=QUEUE, active=True, limit=None)),
    )


# --- the random walk ------------------------------------------------------------------------
Step = Callable[[Harness], Awaitable[object]]


class Walk:
    """Draws the steps of one seed; each step is applied to both backends in turn."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.job_ids: list[UUID] = []
        self.running: list[UUID] = []  # running on the reference backend before this step

    async def lease_of(self, harness: Harness, job_id: UUID, variant: str) -> Lease:
        """The lease a worker might hold for ``job_id``, read from this backend's row (the
        rows are equal on both, or the walk has already failed)."""
        row = await harness.backend.get(job_id)
        assert row is not None
        holder = row.locked_by_worker or WORKERS[0]
        if variant == "stranger":
            holder = WORKERS[1] if holder == WORKERS[0] else WORKERS[0]
        attempt = row.attempt - 1 if variant == "stale" else row.attempt
        return Lease(job_id, holder, attempt)

    def pick(self) -> UUID:
        """A job, most often a running one (the worker writes' interesting case)."""
        if self.running and self.rng.random() < 0.8:
            return self.rng.choice(self.running)
        return self.rng.choice(self.job_ids)

    def variant(self) -> str:
        return self.rng.choices(["current", "stale", "stranger"], weights=[6, 1, 1])[0]

    def next_step(self) -> tuple[str, Step]:
        rng = self.rng
        if len(self.job_ids) < 2 or (len(self.job_ids) < 8 and rng.random() < 0.12):
            job_id = uuid7()
            self.job_ids.append(job_id)
            args = EnqueueArgs(
                actor=rng.choice(["a", "b"]),
                payload={"n": len(self.job_ids)},
                queue=QUEUE,
                priority=rng.choice([0, 0, 1]),
                delay=rng.choice([None, None, DELAY]),
                identity_key=rng.choice([None, None, None, "k"]),
                retry_kind=rng.choice(["transient", "transient", "indefinite", "non_retryable"]),
                max_attempts=rng.randint(1, 3),
                schedule_to_close=rng.choice([None, None, timedelta(seconds=200)]),
                job_id=job_id,
            )
            return f"enqueue {args}", lambda h: h.backend.enqueue(args)
        kind = rng.choice(
            [
                "dispatch",
                "dispatch",
                "start",
                "start",
                "succeed",
                "succeed_many",
                "succeed_in_transaction",
                "fail",
                "cancelled",
                "snooze",
                "retry_after",
                "escalate",
                "abandon",
                "release",
                "cancel_request",
                "heartbeat",
                "travel",
                "travel",
                "scheduled_to_pending",
                "reclaim",
                "deadline_sweep",
                "retry_job",
            ]
        )
        job_id, variant = self.pick(), self.variant()
        worker = rng.choice(WORKERS)
        ran_for = rng.choice([None, 0.5, 2.0])
        label = f"{kind} job={self.job_ids.index(job_id)} {variant} worker={worker.int:x}"

        async def leased(h: Harness) -> Lease:
            return await self.lease_of(h, job_id, variant)

        if kind == "dispatch":
            limit = rng.randint(1, 3)
            return f"dispatch {worker.int:x} {limit}", lambda h: h.backend.dispatch_batch(
                worker, [QUEUE], limit, LOCK_LEASE
            )
        if kind == "start":
            seconds = rng.choice([0.0, 1.5])

            async def start(h: Harness) -> object:
                held = await leased(h)
                return await h.backend.mark_started_many(
                    held.worker_id, [Start(job_id, held.attempt, seconds)]
                )

            return label, start
        if kind == "succeed":
            result = rng.choice([None, 1, "text", [1, 2], {"ok": True}])

            async def succeed(h: Harness) -> object:
                return await h.backend.mark_succeeded(
                    await leased(h), result, ran_for=ran_for or 0.0
                )

            return label, succeed
        if kind == "succeed_many":
            other = self.pick()

            async def succeed_many(h: Harness) -> object:
                first = await leased(h)
                second = await self.lease_of(h, other, "current")
                successes = [
                    Success(first.job_id, first.attempt, "1"),
                    Success(second.job_id, second.attempt, '{"n": 2}', ran_for=1.0),
                ]
                return await h.backend.mark_succeeded_many(first.worker_id, successes)

            return f"{label} + job={self.job_ids.index(other)}", succeed_many
        if kind == "succeed_in_transaction":
            commit = rng.random() < 0.7

            async def in_transaction(h: Harness) -> object:
                held = await leased(h)
                try:
                    async with h.backend.transaction() as connection:
                        done = await h.backend.mark_succeeded_with_conn(
                            connection, held, jsontext.encode({"tx": commit})
                        )
                        if not commit:
                            raise _Rollback
                except _Rollback:
                    return ("rolled back", done)
                return done

            return f"{label} commit={commit}", in_transaction
        if kind == "fail":
            delay = rng.choice([None, DELAY, timedelta(seconds=300)])
            error = ErrorInfo("ValueError", "boom", "Traceback: boom")

            async def fail(h: Harness) -> object:
                return await h.backend.mark_failed_or_retry(
                    await leased(h), error, delay, ran_for=ran_for
                )

            return f"{label} delay={delay}", fail
        if kind == "cancelled":

            async def cancelled(h: Harness) -> object:
                return await h.backend.mark_cancelled(await leased(h), ran_for=ran_for)

            return label, cancelled
        if kind == "snooze":

            async def snooze(h: Harness) -> object:
                return await h.backend.mark_snoozed(await leased(h), DELAY, ran_for=ran_for)

            return label, snooze
        if kind == "retry_after":
            consume = rng.random() < 0.5

            async def retry_after(h: Harness) -> object:
                return await h.backend.mark_retry_after(
                    await leased(h), DELAY, consume_budget=consume, ran_for=ran_for
                )

            return f"{label} consume={consume}", retry_after
        if kind == "escalate":
            reason = rng.choice(["requested", "shutdown"])

            async def escalate(h: Harness) -> object:
                return await h.backend.write_cancel_escalation(await leased(h), reason=reason)

            return label, escalate
        if kind == "abandon":

            async def abandon(h: Harness) -> object:
                return await h.backend.mark_abandoned(await leased(h), "ignored its cancel")

            return label, abandon
        if kind == "release":
            pool = self.running or self.job_ids
            others = rng.sample(pool, k=min(len(pool), rng.randint(1, 3)))
            reason = rng.choice(["shutdown", "heartbeat_lost"])

            async def release(h: Harness) -> object:
                leases = [await self.lease_of(h, other, "current") for other in others]
                return await h.backend.release_leases(
                    worker, leases, reason=reason, retry_delay=DELAY
                )

            return f"release {worker.int:x} {[self.job_ids.index(o) for o in others]}", release
        if kind == "cancel_request":
            return label, lambda h: h.backend.write_cancel_request(job_id, "operator")
        if kind == "heartbeat":
            pool = [*self.running, self.pick()]
            named = list(dict.fromkeys(rng.sample(pool, k=rng.randint(0, len(pool)))))

            async def heartbeat(h: Harness) -> object:
                leases = [await self.lease_of(h, other, "current") for other in named]
                return await h.backend.heartbeat(worker, LOCK_LEASE, leases)

            return f"heartbeat {worker.int:x} {[self.job_ids.index(o) for o in named]}", heartbeat
        if kind == "travel":
            seconds = rng.choice(TRAVELS)

            async def travel(h: Harness) -> object:
                await h.travel(seconds)
                return None

            return f"travel {seconds}", travel
        if kind == "scheduled_to_pending":
            return kind, lambda h: h.backend.scheduled_to_pending()
        if kind == "reclaim":
            return kind, lambda h: h.backend.reclaim_expired_locks(timedelta(0), timedelta(0))
        if kind == "deadline_sweep":
            return kind, lambda h: h.backend.deadline_sweep()
        return label, lambda h: h.backend.retry_job(job_id)


class _Rollback(Exception):
    """Ends a transaction block by rolling it back."""


async def _apply(harness: Harness, step: Step) -> object:
    try:
        answer = _answer(await step(harness))
    except ValueError as exc:  # the same refusal must come from both
        answer = ("raised", type(exc).__name__)
    if harness.clock is not None:
        harness.clock.advance(0.001)  # every step happens after the one before it
    return answer


@pytest.mark.parametrize("seed", SEEDS)
async def test_both_backends_answer_a_random_walk_the_same_way(
    pair: tuple[Harness, Harness], seed: int
) -> None:
    memory, postgres = pair
    for harness in pair:
        for worker in WORKERS:
            info = WorkerInfo(worker, "host", 1, [QUEUE], ["a", "b"], 4)
            await harness.backend.register_worker(info)
    for harness in pair:  # one capped actor: caps count claimed and started jobs alike
        await harness.backend.sync_actor_configs(
            [ActorDeclaration("b", QUEUE, {}, 2, None, None)], force=False
        )
    walk = Walk(seed)
    history: list[str] = []
    for _ in range(STEPS):
        walk.running = [
            row.id
            for row in await memory.backend.list_jobs(JobFilter(status="running", limit=None))
        ]
        label, step = walk.next_step()
        history.append(label)
        expected = await _apply(memory, step)
        actual = await _apply(postgres, step)
        trail = "\n".join(history[-12:])
        assert actual == expected, f"seed {seed}, answers differ after:\n{trail}"
        seen_memory = await _seen(memory.backend, walk.job_ids)
        seen_postgres = await _seen(postgres.backend, walk.job_ids)
        assert seen_postgres == seen_memory, (
            f"seed {seed}, state differs after:\n{trail}\n"
            + json.dumps(_diff(seen_memory, seen_postgres), default=str, indent=1)
        )


def _diff(memory: Any, postgres: Any) -> list[object]:
    """The per-job entries that differ, for the failure message."""
    jobs_memory, jobs_postgres = memory[0], postgres[0]
    differing: list[object] = [
        {"job": n, "memory": m, "postgres": p}
        for n, (m, p) in enumerate(zip(jobs_memory, jobs_postgres, strict=True))
        if m != p
    ]
    differing.extend(
        {"memory": m, "postgres": p}
        for m, p in zip(memory[1:], postgres[1:], strict=True)
        if m != p
    )
    return differing
