"""The operations the differential test draws, and how each becomes one step on a backend.

Hypothesis draws ``Op`` values (a kind and its arguments, printed as a call in a failing
example); ``Walk`` resolves the jobs an operation names against the jobs enqueued so far and
returns a labelled step the test applies to both backends in turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from hypothesis import strategies as st

from taskq_core import jsontext
from taskq_core.backend.protocol import (
    Backend,
    EnqueueArgs,
    ErrorInfo,
    Lease,
    LostAttempt,
    PrunePolicy,
    Start,
    Success,
)
from taskq_core.ids import uuid7
from taskq_core.statemachine import TERMINAL_STATUSES
from tests.conformance.conftest import Harness

QUEUE = "diff"
WORKERS = (UUID(int=0xA), UUID(int=0xB))
LOCK_LEASE = timedelta(seconds=30)
DELAY = timedelta(seconds=5)
# Travel steps never add up to a threshold of the operations below plus less than the
# steps' own duration, so "past" means the same thing on both clocks.
TRAVELS = (3, 7, 31, 65)
MAX_JOBS = 8


# --- the operations hypothesis draws ---------------------------------------------------------
@dataclass(frozen=True)
class Pick:
    """The job an operation names: while jobs run and ``running`` is set, the index-th running
    one (the worker writes' interesting case); otherwise the index-th job enqueued."""

    running: bool
    index: int

    def __repr__(self) -> str:
        return f"{'running' if self.running else 'job'}[{self.index}]"


@dataclass(frozen=True)
class Op:
    """One drawn operation: its kind and the arguments it was drawn with."""

    kind: str
    fields: tuple[tuple[str, Any], ...] = ()

    def __getitem__(self, name: str) -> Any:
        return dict(self.fields)[name]

    def __repr__(self) -> str:
        return f"{self.kind}({', '.join(f'{k}={v!r}' for k, v in self.fields)})"


def _op(kind: str, **fields: st.SearchStrategy[Any]) -> tuple[str, st.SearchStrategy[Op]]:
    """A kind of operation and the strategy that draws it with its arguments."""
    return kind, st.fixed_dictionaries(fields).map(lambda drawn: Op(kind, tuple(drawn.items())))


_pick = st.builds(Pick, st.sampled_from([True, True, True, True, False]), st.integers(0, 7))
_variant = st.sampled_from(["current"] * 6 + ["stale", "stranger"])
_worker = st.integers(0, 1)
_ran_for = st.sampled_from([None, 0.5, 2.0])
_leased = {"job": _pick, "variant": _variant}

_BY_KIND = dict(
    [
        _op("promote_scheduled_jobs"),  # first: a failing sequence shrinks towards it
        _op(
            "enqueue",
            actor=st.sampled_from(["a", "b"]),
            priority=st.sampled_from([0, 0, 1]),
            delay=st.sampled_from([None, None, DELAY]),
            identity_key=st.sampled_from([None, None, None, "k"]),
            retry_kind=st.sampled_from(["transient", "transient", "indefinite", "non_retryable"]),
            max_attempts=st.integers(1, 3),
            schedule_to_close=st.sampled_from([None, None, timedelta(seconds=200)]),
        ),
        _op("dispatch", worker=_worker, limit=st.integers(1, 3)),
        _op("start", **_leased, seconds=st.sampled_from([0.0, 1.5])),
        _op(
            "succeed",
            **_leased,
            result=st.sampled_from([None, 1, "text", [1, 2], {"ok": True}]),
            ran_for=_ran_for,
        ),
        _op("succeed_many", **_leased, other=_pick),
        _op("succeed_in_transaction", **_leased, commit=st.sampled_from([True, True, False])),
        _op(
            "fail",
            **_leased,
            delay=st.sampled_from([None, DELAY, timedelta(seconds=300)]),
            ran_for=_ran_for,
        ),
        _op("cancelled", **_leased, ran_for=_ran_for),
        _op("snooze", **_leased, ran_for=_ran_for),
        _op(
            "retry_after",
            **_leased,
            consume=st.booleans(),
            ran_for=_ran_for,
            reason=st.sampled_from([None, "rate_limit:api"]),
        ),
        _op("escalate", **_leased, reason=st.sampled_from(["requested", "shutdown"])),
        _op("abandon", **_leased),
        _op("interrupt", **_leased, ran_for=_ran_for),
        _op("record_lost", **_leased),
        _op(
            "release",
            worker=_worker,
            jobs=st.lists(st.integers(0, 7), min_size=1, max_size=3),
            reason=st.sampled_from(["shutdown", "heartbeat_lost"]),
        ),
        _op("cancel_request", job=_pick),
        _op("heartbeat", worker=_worker, jobs=st.lists(st.integers(0, 8), max_size=4)),
        _op("travel", seconds=st.sampled_from(TRAVELS)),
        _op("reclaim"),
        _op("fail_overdue_jobs"),
        _op("retry_job", job=_pick),
        # Retention thresholds are whole seconds, as the travels are (see TRAVELS).
        _op("prune", keep=st.sampled_from([10, 60]), batch_size=st.integers(1, 3)),
    ]
)
ENQUEUE = _BY_KIND["enqueue"]
# Enqueues about one step in eight (until MAX_JOBS); dispatch, start and travel twice as
# often as the rest. (one_of folds repeated branches into one, hence weighted kinds.)
_WEIGHTS = {"enqueue": 3, "dispatch": 2, "start": 2, "travel": 2}
OPERATION = st.sampled_from(
    [kind for kind in _BY_KIND for _ in range(_WEIGHTS.get(kind, 1))]
).flatmap(_BY_KIND.__getitem__)


# --- applying them to both backends ----------------------------------------------------------
Step = Callable[[Harness], Awaitable[object]]


class _Rollback(Exception):
    """Ends a transaction block by rolling it back."""


class Walk:
    """Turns each drawn operation into a step against the jobs enqueued so far; the step is
    then applied to both backends in turn."""

    def __init__(self) -> None:
        self.job_ids: list[UUID] = []
        self.running: list[UUID] = []  # running on the reference backend before this step

    async def lease_of(self, harness: Harness, job_id: UUID, variant: str) -> Lease:
        """The lease a worker might hold for ``job_id``, read from this backend's row (the
        rows are equal on both, or the walk has already failed)."""
        row = await harness.backend.get(job_id)
        if row is None:  # pruned to the archive: any lease is a stale one
            return Lease(job_id, WORKERS[1] if variant == "stranger" else WORKERS[0], 1)
        holder = row.locked_by_worker or WORKERS[0]
        if variant == "stranger":
            holder = WORKERS[1] if holder == WORKERS[0] else WORKERS[0]
        attempt = row.attempt - 1 if variant == "stale" else row.attempt
        return Lease(job_id, holder, attempt)

    def pick(self, pick: Pick) -> UUID:
        if pick.running and self.running:
            return self.running[pick.index % len(self.running)]
        return self.job_ids[pick.index % len(self.job_ids)]

    def some(self, indexes: list[int], pool: list[UUID]) -> list[UUID]:
        """Distinct jobs of ``pool`` named by ``indexes``, in their order."""
        return list(dict.fromkeys(pool[n % len(pool)] for n in indexes)) if pool else []

    def name(self, job_id: UUID) -> int:
        return self.job_ids.index(job_id)

    def step(self, op: Op) -> tuple[str, Step | None]:
        """The step's label (with the jobs it resolved to) and the step; None to skip it."""
        if op.kind == "enqueue":
            return self.enqueue(op)
        if op.kind == "dispatch":
            worker, limit = WORKERS[op["worker"]], op["limit"]
            return f"dispatch {worker.int:x} {limit}", lambda h: h.backend.dispatch_batch(
                worker, [QUEUE], limit, LOCK_LEASE
            )
        if op.kind == "release":
            return self.release(op)
        if op.kind == "heartbeat":
            worker = WORKERS[op["worker"]]
            named = self.some(op["jobs"], self.running + self.job_ids)

            async def heartbeat(h: Harness) -> object:
                leases = [await self.lease_of(h, other, "current") for other in named]
                return await h.backend.heartbeat(worker, LOCK_LEASE, leases)

            return f"heartbeat {worker.int:x} {[self.name(o) for o in named]}", heartbeat
        if op.kind == "travel":
            seconds = op["seconds"]

            async def travel(h: Harness) -> object:
                await h.travel(seconds)
                return None

            return f"travel {seconds}", travel
        if op.kind == "promote_scheduled_jobs":
            return op.kind, lambda h: h.backend.promote_scheduled_jobs()
        if op.kind == "reclaim":
            return op.kind, lambda h: h.backend.reclaim_expired_leases(timedelta(0), timedelta(0))
        if op.kind == "fail_overdue_jobs":
            return op.kind, lambda h: h.backend.fail_overdue_jobs()
        if op.kind == "prune":
            policy = PrunePolicy(
                retention=dict.fromkeys(TERMINAL_STATUSES, timedelta(seconds=op["keep"])),
                archive_for=timedelta(hours=1),
                batch_size=op["batch_size"],
            )
            return f"{op}", lambda h: h.backend.prune_jobs(policy)
        job_id = self.pick(op["job"])
        if op.kind == "cancel_request":
            label = f"cancel_request job={self.name(job_id)}"
            return label, lambda h: h.backend.write_cancel_request(job_id, "operator")
        if op.kind == "retry_job":
            return f"retry_job job={self.name(job_id)}", lambda h: h.backend.retry_job(job_id)
        return self.lease_write(op, job_id)

    def enqueue(self, op: Op) -> tuple[str, Step | None]:
        if len(self.job_ids) >= MAX_JOBS:
            return f"enqueue skipped ({MAX_JOBS} jobs)", None
        job_id = uuid7()
        self.job_ids.append(job_id)
        args = EnqueueArgs(
            payload={"n": len(self.job_ids)}, queue=QUEUE, job_id=job_id, **dict(op.fields)
        )
        return f"{op} -> job={len(self.job_ids) - 1}", lambda h: h.backend.enqueue(args)

    def release(self, op: Op) -> tuple[str, Step | None]:
        worker, reason = WORKERS[op["worker"]], op["reason"]
        others = self.some(op["jobs"], self.running or self.job_ids)

        async def release(h: Harness) -> object:
            leases = [await self.lease_of(h, other, "current") for other in others]
            return await h.backend.release_leases(worker, leases, reason=reason, retry_delay=DELAY)

        return f"release {worker.int:x} {[self.name(o) for o in others]} {reason}", release

    def lease_write(self, op: Op, job_id: UUID) -> tuple[str, Step | None]:
        """The writes a lease holder (or a stale or stranger one) makes on ``job_id``."""
        variant, kind = op["variant"], op.kind
        extra = {k: v for k, v in op.fields if k not in ("job", "variant", "other")}
        label = f"{kind} job={self.name(job_id)} {variant} {extra}"
        other = self.pick(op["other"]) if kind == "succeed_many" else job_id

        async def leased(h: Harness) -> Lease:
            return await self.lease_of(h, job_id, variant)

        async def run(h: Harness) -> object:
            backend = h.backend
            held = await leased(h)
            if kind == "start":
                start = Start(job_id, held.attempt, op["seconds"])
                return await backend.mark_started_many(held.worker_id, [start])
            if kind == "succeed":
                return await backend.mark_succeeded(
                    held, op["result"], ran_for=op["ran_for"] or 0.0
                )
            if kind == "succeed_many":
                second = await self.lease_of(h, other, "current")
                successes = [
                    Success(held.job_id, held.attempt, "1"),
                    Success(second.job_id, second.attempt, '{"n": 2}', ran_for=1.0),
                ]
                return await backend.mark_succeeded_many(held.worker_id, successes)
            if kind == "succeed_in_transaction":
                return await _succeed_in_transaction(backend, held, op["commit"])
            if kind == "fail":
                error = ErrorInfo("ValueError", "boom", "Traceback: boom")
                return await backend.mark_failed_or_retry(
                    held, error, op["delay"], ran_for=op["ran_for"]
                )
            if kind == "cancelled":
                return await backend.mark_cancelled(held, ran_for=op["ran_for"])
            if kind == "snooze":
                return await backend.mark_snoozed(held, DELAY, ran_for=op["ran_for"])
            if kind == "retry_after":
                return await backend.mark_retry_after(
                    held,
                    DELAY,
                    consume_budget=op["consume"],
                    ran_for=op["ran_for"],
                    reason=op["reason"],
                )
            if kind == "escalate":
                return await backend.write_cancel_escalation(held, reason=op["reason"])
            if kind == "interrupt":
                return await backend.mark_interrupted(held, ran_for=op["ran_for"])
            if kind == "record_lost":
                lost = LostAttempt(held.job_id, held.attempt, 2.0, 1.0, "its lease was lost")
                return await backend.record_lost_attempts(held.worker_id, [lost])
            assert kind == "abandon", kind
            return await backend.mark_abandoned(held, "ignored its cancel")

        if kind == "succeed_many":
            label += f" + job={self.name(other)}"
        return label, run


async def _succeed_in_transaction(backend: Backend, held: Lease, commit: bool) -> object:
    try:
        async with backend.transaction() as connection:
            done = await backend.mark_succeeded_with_conn(
                connection, held, jsontext.encode({"tx": commit})
            )
            if not commit:
                raise _Rollback
    except _Rollback:
        return ("rolled back", done)
    return done
