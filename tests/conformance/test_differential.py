"""Differential: the same worker, operator and sweep operations on both backends, side by side,
must leave what a caller sees identical after every step: each call's answer, every job's row,
attempts and events, what the archive holds of it, the worker rows' counts, the dashboard's
counts and the queues with waiting jobs.

The conformance files pin each rule once; this walks the combinations between them (a cancel
request on a claimed job that is then released, a stale lease after a snooze and a reclaim,
...). Hypothesis draws the operation sequences (derandomized, so CI runs the same ones every
time) and shrinks a failing one to a short sequence it prints. Timestamps are compared as
"set or not", never by value: the memory clock moves a millisecond per step, Postgres's by
however long the step took.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from hypothesis.stateful import initialize, rule, run_state_machine_as_test

from taskq_core.backend.protocol import (
    ActorDeclaration,
    ArchivedJob,
    AttemptRow,
    Backend,
    EventRow,
    HeartbeatResult,
    JobFilter,
    JobRow,
    WorkerInfo,
)
from tests.conformance.conftest import Harness
from tests.conformance.differential_operations import (
    ENQUEUE,
    MAX_JOBS,
    OPERATION,
    QUEUE,
    WORKERS,
    Op,
    Walk,
)
from tests.conformance.side_by_side import SideBySide, answer_of, open_pair, run_settings
from tests.conftest import PgTarget

# Steps of a sequence, the two opening enqueues included (hypothesis runs them all unless it
# is shrinking a failure).
STEPS = 60
# CI's fixed sequences (``side_by_side.examples``).
EXAMPLES = 24


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


def _archived(archived: ArchivedJob | None) -> object:
    return None if archived is None else _row(archived.job)


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
            _archived(await backend.get_archived_job(job_id)),
            [_attempt(a) for a in await backend.get_archived_attempts(job_id)],
        )
        for job_id in job_ids
    ]
    workers = sorted((w.id, w.running_jobs, w.claimed_jobs) for w in await backend.list_workers())
    stats = await backend.get_dashboard_stats(timedelta(hours=1), 1)
    queues = [(q.name, q.pending, q.scheduled, q.running, q.claimed) for q in stats.queues]
    fleet = await backend.get_fleet_stats(timedelta(hours=1))
    actors = [
        (a.queue, a.actor, a.pending, a.running, a.claimed, a.finished)
        for q in fleet.queues
        for a in q.actors
    ]
    return (
        jobs,
        workers,
        queues,
        actors,
        await backend.count_jobs(JobFilter(queue=QUEUE, active=True, limit=None)),
        await backend.list_waiting_queues(),
    )


# --- the machine -----------------------------------------------------------------------------
class Differential(SideBySide):
    """Both backends side by side: every drawn operation goes to each, then the answers and
    everything a caller can read are compared. Runs its coroutines on a loop of its own."""

    def __init__(self, pg: PgTarget) -> None:
        super().__init__(pg)
        self.walk = Walk()

    async def open(self, pg: PgTarget) -> tuple[Harness, Harness]:
        """Each backend with the walk's workers and its one capped actor (caps count claimed
        and started jobs alike)."""
        pair = await open_pair(pg, MAX_JOBS)
        for harness in pair:
            for worker in WORKERS:
                info = WorkerInfo(worker, "host", 1, [QUEUE], ["a", "b"], 4)
                await harness.backend.register_worker(info)
            await harness.backend.sync_actor_configs(
                [ActorDeclaration("b", QUEUE, {}, 2, None, None)], force=False
            )
        return pair

    @initialize(op=ENQUEUE)
    def first_job(self, op: Op) -> None:
        """Operations name jobs: two exist from the start."""
        self.runner.run(self.apply(op))

    @initialize(op=ENQUEUE)
    def second_job(self, op: Op) -> None:
        """Operations name jobs: two exist from the start."""
        self.runner.run(self.apply(op))

    @rule(op=OPERATION)
    def step(self, op: Op) -> None:
        """One operation on both backends."""
        self.runner.run(self.apply(op))

    async def apply(self, op: Op) -> None:
        """Apply ``op`` to memory, then Postgres; compare the answers, then all state."""
        memory, postgres, walk = self.memory, self.postgres, self.walk
        walk.running = [
            row.id
            for row in await memory.backend.list_jobs(JobFilter(status="running", limit=None))
        ]
        label, step = walk.step(op)
        self.history.append(label)
        if step is None:
            return
        expected = await answer_of(memory, step, _answer)
        actual = await answer_of(postgres, step, _answer)
        trail = self.trail()
        assert actual == expected, f"answers differ after:\n{trail}"
        seen_memory = await _seen(memory.backend, walk.job_ids)
        seen_postgres = await _seen(postgres.backend, walk.job_ids)
        assert seen_postgres == seen_memory, f"state differs after:\n{trail}\n" + json.dumps(
            _diff(seen_memory, seen_postgres), default=str, indent=1
        )


# A passing run takes about half a minute; a failure is shrunk to a few steps in a minute or
# two (hypothesis gives up shrinking after five).
@pytest.mark.timeout(600)
def test_both_backends_answer_the_same_operations_the_same_way(
    differential_schema: PgTarget,
) -> None:
    class OnTheTestSchema(Differential):
        def __init__(self) -> None:
            super().__init__(differential_schema)

    run_state_machine_as_test(OnTheTestSchema, settings=run_settings(EXAMPLES, STEPS))


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
