"""The random workflows and operations the workflow differential test draws, how each
operation becomes one step on a backend, and the release rule's checks made after each.

Hypothesis draws a DAG (``DAG``: each step's ``StepSpec``, its dependencies among the steps
before it, what it requires of them, whether its start is an hour ahead, how many attempts it
has) and then ``Op`` values; ``WorkflowWalk`` turns an operation into a labelled step that the
test applies to both backends in turn, then checks the rule on what a caller reads back
(``Seen``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from hypothesis import strategies as st

from taskq_core.backend.protocol import Backend, ErrorInfo, JobRow, Start
from taskq_core.backend.protocol.values import EnqueueArgs
from taskq_core.backend.protocol.workflows import (
    WORKFLOW_ID_KEY,
    WORKFLOW_REQUIRES_KEY,
    WORKFLOW_STEP_KEY,
    NewStep,
    NewWorkflow,
    Requires,
    WorkflowCancel,
    WorkflowRelease,
    WorkflowStatus,
    decide_step,
)
from taskq_core.ids import uuid7
from taskq_core.statemachine import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.differential_operations import Op

QUEUE = "wf_diff"
WORKER = UUID(int=0xC)
MAX_STEPS = 12
# No threshold is ever near: a lease and a delayed start last far longer than a sequence
# takes on either clock, and the one travel passes both at once.
LEASE = timedelta(minutes=10)
DELAY = timedelta(hours=1)
TRAVEL = 3 * 3600
BOOM = ErrorInfo("ValueError", "boom", "Traceback: boom")
S = JobStatus


# --- the workflow hypothesis draws -----------------------------------------------------------
@dataclass(frozen=True)
class StepSpec:
    """One step: the earlier steps it waits for, what it requires of them, whether its start
    is ``DELAY`` ahead, and its attempts (2: a reclaimed attempt is retried; 1: it crashes)."""

    after: tuple[int, ...]
    requires: Requires
    delayed: bool
    attempts: int

    def __repr__(self) -> str:
        flags = f"{'F' if self.requires == 'finished' else ''}{'D' if self.delayed else ''}"
        return f"{list(self.after)}{flags}{self.attempts}"


@st.composite
def _dag(draw: st.DrawFn) -> tuple[StepSpec, ...]:
    count = draw(st.integers(2, MAX_STEPS))
    specs = []
    for n in range(count):
        earlier = st.sets(st.integers(0, n - 1), max_size=min(n, 3)) if n else st.just(set())
        specs.append(
            StepSpec(
                after=tuple(sorted(draw(earlier))),
                requires=draw(st.sampled_from(["succeeded", "succeeded", "finished"])),
                delayed=draw(st.sampled_from([False, False, False, True])),
                attempts=draw(st.sampled_from([1, 2])),
            )
        )
    return tuple(specs)


DAG = _dag()


def _op(kind: str, **fields: st.SearchStrategy[Any]) -> tuple[str, st.SearchStrategy[Op]]:
    """A kind of operation and the strategy that draws it with its arguments."""
    return kind, st.fixed_dictionaries(fields).map(lambda drawn: Op(kind, tuple(drawn.items())))


_step = st.integers(0, MAX_STEPS - 1)
_BY_KIND = dict(
    [
        _op("sweep"),  # first: a failing sequence shrinks towards it
        _op("dispatch"),
        _op(
            "end",
            step=_step,
            outcome=st.sampled_from(["succeeded", "succeeded", "failed", "retried", "cancelled"]),
            hook=st.sampled_from([True, True, True, False]),
        ),
        _op("expire"),
        _op("cancel_step", step=_step),
        _op("cancel_workflow"),
        _op("retry_workflow"),
    ]
)
# Steps end most often (an end with none running ends one a dispatch hands out first).
# (one_of folds repeated branches into one, hence weighted kinds.)
_WEIGHTS = {"end": 6, "dispatch": 2, "retry_workflow": 2}
OPERATION = st.sampled_from(
    [kind for kind in _BY_KIND for _ in range(_WEIGHTS.get(kind, 1))]
).flatmap(_BY_KIND.__getitem__)


# --- what a caller reads back ----------------------------------------------------------------
@dataclass(frozen=True)
class Seen:
    """A workflow as a caller reads it, without timestamps: its row, each step's summary
    (by step index) and each step's events."""

    workflow: tuple[Any, ...]
    steps: tuple[tuple[Any, ...], ...]
    events: tuple[tuple[tuple[Any, ...], ...], ...]

    def status(self, n: int) -> JobStatus:
        status: JobStatus = self.steps[n][0]
        return status

    @property
    def workflow_status(self) -> WorkflowStatus:
        status: WorkflowStatus = self.workflow[0]
        return status


async def seen(backend: Backend, workflow_id: UUID, job_ids: Sequence[UUID]) -> Seen:
    """The workflow and its steps (in ``job_ids``' order) as ``backend`` shows them."""
    row = await backend.get_workflow(workflow_id)
    assert row is not None
    steps = {step.job_id: step for step in await backend.list_workflow_steps(workflow_id)}
    jobs = [await backend.get(job_id) for job_id in job_ids]
    summaries = []
    for job_id, job in zip(job_ids, jobs, strict=True):
        step = steps[job_id]
        assert job is not None
        summaries.append(
            (
                step.status,
                step.attempt,
                step.after,
                step.requires,
                step.cancel_reason,
                step.error_class,
                step.started_at is not None,
                step.finished_at is not None,
                job.cancel_phase,
                job.locked_by_worker,
                job.result,
            )
        )
    events = [
        tuple((e.kind, e.from_status, e.to_status, e.detail) for e in await backend.get_events(j))
        for j in job_ids
    ]
    counts = tuple(sorted((status.value, n) for status, n in row.counts.items()))
    workflow = (
        row.status,
        row.finished_at is not None,
        row.cancel_requested_at is not None,
        counts,
    )
    return Seen(workflow, tuple(summaries), tuple(events))


def answer(value: object, names: dict[UUID, int]) -> object:
    """A call's answer, comparable across backends."""
    if isinstance(value, WorkflowRelease):
        return value.released, value.cancelled, [s.value for _, s in value.ended]
    if isinstance(value, WorkflowCancel):
        return value.cancelled, value.stopping
    if isinstance(value, list) and all(isinstance(v, JobRow) for v in value):
        return sorted(names[row.id] for row in value)
    if isinstance(value, tuple):
        return tuple(answer(v, names) for v in value)
    return value


# --- turning operations into steps -----------------------------------------------------------
Step = Callable[[Harness], Awaitable[object]]


class WorkflowWalk:
    """One drawn workflow: its steps' ids (the same on both backends), and each operation
    as a step against it. ``dirty``: a step ended with no release run after it (a crash
    before the hook, an operator's cancel, a reclaim) and no sweep has run since."""

    def __init__(self, dag: Sequence[StepSpec]) -> None:
        self.dag = tuple(dag)
        self.workflow_id = uuid7()
        self.job_ids = [uuid7() for _ in self.dag]
        self.names = {job_id: n for n, job_id in enumerate(self.job_ids)}
        self.dirty = False
        # Steps running when a workflow retry ran one of their dependencies again: their
        # later attempts are not held back (``retry_workflow``'s limit), until they end.
        self.overtaken: set[int] = set()

    def new_steps(self) -> list[NewStep]:
        steps = []
        for n, spec in enumerate(self.dag):
            metadata: dict[str, Any] = {
                WORKFLOW_ID_KEY: str(self.workflow_id),
                WORKFLOW_STEP_KEY: f"s{n}",
            }
            if spec.requires == "finished":
                metadata[WORKFLOW_REQUIRES_KEY] = "finished"
            args = EnqueueArgs(
                actor="step",
                payload={"n": n},
                queue=QUEUE,
                job_id=self.job_ids[n],
                metadata=metadata,
                waiting=bool(spec.after),
                delay=DELAY if spec.delayed else None,
                retry_kind="transient",
                max_attempts=spec.attempts,
            )
            steps.append(NewStep(args, f"s{n}", tuple(self.job_ids[p] for p in spec.after)))
        return steps

    async def create(self, harness: Harness) -> object:
        return await harness.backend.create_workflow(
            NewWorkflow(self.workflow_id, "diff"), self.new_steps()
        )

    def step(self, op: Op, before: Seen) -> tuple[str, Step | None]:
        """The step's label and the step (None: nothing to do, skipped)."""
        backend_step: dict[str, Callable[[Op, Seen], tuple[str, Step | None]]] = {
            "sweep": self._sweep,
            "dispatch": self._dispatch,
            "end": self._end,
            "expire": self._expire,
            "cancel_step": self._cancel_step,
            "cancel_workflow": self._cancel_workflow,
            "retry_workflow": self._retry_workflow,
        }
        return backend_step[op.kind](op, before)

    def _sweep(self, op: Op, before: Seen) -> tuple[str, Step | None]:
        async def sweep(h: Harness) -> object:
            total = WorkflowRelease()
            while True:  # as the leader's pass does: until a call moves nothing
                release = await h.backend.release_stale_workflow_steps()
                total += release
                if release.released + release.cancelled + len(release.ended) == 0:
                    return total

        return "sweep", sweep

    def _dispatch(self, op: Op, before: Seen) -> tuple[str, Step | None]:
        async def dispatch(h: Harness) -> object:
            promoted = await h.backend.promote_scheduled_jobs()
            claimed = await h.backend.dispatch_batch(WORKER, [QUEUE], MAX_STEPS, LEASE)
            starts = [Start(job.id, job.attempt) for job in claimed]
            started = await h.backend.mark_started_many(WORKER, starts)
            return promoted, claimed, sorted(self.names[j] for j in started)

        return "dispatch", dispatch

    def running(self, seen: Seen) -> list[int]:
        return [n for n in range(len(self.dag)) if seen.status(n) is S.RUNNING]

    def _end(self, op: Op, before: Seen) -> tuple[str, Step | None]:
        running = self.running(before)
        if not running:
            return f"{op} skipped (none running)", None
        n = running[op["step"] % len(running)]
        job_id, outcome, hook = self.job_ids[n], op["outcome"], op["hook"]

        async def end(h: Harness) -> object:
            backend = h.backend
            row = await backend.get(job_id)
            assert row is not None
            lease = row.lease()
            if outcome == "succeeded":
                written: object = await backend.mark_succeeded(lease, {"step": n})
            elif outcome == "cancelled":
                written = await backend.mark_cancelled(lease)
            else:
                delay = None if outcome == "failed" else timedelta(0)
                failed = await backend.mark_failed_or_retry(lease, BOOM, delay)
                written = None if failed is None else failed.status
            after = await backend.get(job_id)
            assert after is not None
            if not hook or after.status not in TERMINAL_STATUSES:
                return written, after.status
            return written, after.status, await backend.release_workflow_steps([job_id])

        return f"end s{n} {outcome}{'' if hook else ' (no hook)'}", end

    def _expire(self, op: Op, before: Seen) -> tuple[str, Step | None]:
        async def expire(h: Harness) -> object:
            await h.travel(TRAVEL)
            reclaimed = await h.backend.reclaim_expired_leases(timedelta(0), timedelta(0))
            return reclaimed, await h.backend.promote_scheduled_jobs()

        return "expire (leases and delays pass, reclaim, promote)", expire

    def _cancel_step(self, op: Op, before: Seen) -> tuple[str, Step | None]:
        n = op["step"] % len(self.dag)
        job_id = self.job_ids[n]

        async def cancel(h: Harness) -> object:
            return await h.backend.write_cancel_request(job_id, "operator")

        return f"cancel_step s{n}", cancel

    def _cancel_workflow(self, op: Op, before: Seen) -> tuple[str, Step | None]:
        async def cancel(h: Harness) -> object:
            return await h.backend.cancel_workflow(self.workflow_id, "stop")

        return "cancel_workflow", cancel

    def _retry_workflow(self, op: Op, before: Seen) -> tuple[str, Step | None]:
        async def retry(h: Harness) -> object:
            return await h.backend.retry_workflow(self.workflow_id)

        return "retry_workflow", retry

    # --- the release rule, checked on what a caller read -------------------------------------
    def decision(self, n: int, seen: Seen) -> str:
        spec = self.dag[n]
        return decide_step(spec.requires, [seen.status(p) for p in spec.after])

    def check(self, op: Op, label: str, before: Seen, after: Seen) -> None:
        """The release rule, the once-only release and the workflow's end, after ``op``."""
        self._track_dirty(op, before, after)
        self._track_overtaken(op, before, after)
        problems = [
            *self._left_waiting(op, label, before, after),
            *self._runs_allowed(before, after),
            *self._released_once(after),
            *self._workflow_end(after),
            *self._ended_as_the_rule_says(before, after),
        ]
        assert not problems, "\n".join(problems)

    def _left_waiting(self, op: Op, label: str, before: Seen, after: Seen) -> list[str]:
        """Each step that left ``waiting`` in this operation did so as the rule decided
        from its dependencies' statuses then (or by an operator's cancel)."""
        problems = []
        for n in range(len(self.dag)):
            was, now = before.status(n), after.status(n)
            if was is not S.WAITING or now is S.WAITING:
                continue
            decided = self.decision(n, after)
            operator = op.kind == "cancel_workflow" or label == f"cancel_step s{n}"
            if now in (S.PENDING, S.SCHEDULED) and decided == "release":
                continue
            if now is S.CANCELLED and (decided == "cancel" or operator):
                continue
            problems.append(f"s{n} went waiting -> {now.value} where the rule says {decided}")
        return problems

    def _runs_allowed(self, before: Seen, after: Seen) -> list[str]:
        """A step that may start (pending, scheduled) is one the rule releases from its
        dependencies' statuses now, and so is a step as it is handed out (running). One
        already running when a workflow retry runs a dependency again is left alone: it
        keeps running, and its later attempts are not held back, until it ends."""
        return [
            f"s{n} is {after.status(n).value} while the rule says {self.decision(n, after)}"
            for n in range(len(self.dag))
            if (
                after.status(n) in (S.PENDING, S.SCHEDULED)
                or (after.status(n) is S.RUNNING and before.status(n) is not S.RUNNING)
            )
            and self.decision(n, after) != "release"
            and n not in self.overtaken
        ]

    def _released_once(self, after: Seen) -> list[str]:
        """Every ``released`` event follows the step's own entry into ``waiting`` (its
        enqueue, which writes no event, or a workflow retry) with no other release between."""
        problems = []
        for n, events in enumerate(after.events):
            armed = bool(self.dag[n].after)
            for kind, _, to_status, _ in events:
                if kind == "released":
                    if not armed:
                        problems.append(f"s{n} released twice: {[e[0] for e in events]}")
                    armed = False
                elif to_status is S.WAITING:
                    armed = True
        return problems

    def _workflow_end(self, after: Seen) -> list[str]:
        """A workflow ends only when its steps all ended, and (unless a release was skipped
        since the last sweep) it ends as soon as they did, with no step left waiting that
        the rule would decide."""
        statuses = [after.status(n) for n in range(len(self.dag))]
        active = any(s in ACTIVE_STATUSES for s in statuses)
        status = after.workflow_status
        if status is not WorkflowStatus.RUNNING and active:
            return [f"workflow {status.value} while steps are {Counter(statuses)}"]
        if self.dirty:
            return []
        problems = [
            f"s{n} still waits though the rule says {self.decision(n, after)}"
            for n in range(len(self.dag))
            if statuses[n] is S.WAITING and self.decision(n, after) != "wait"
        ]
        if active or status is not WorkflowStatus.RUNNING:
            return problems  # ended before this operation, or may not end yet
        problems.append(f"workflow running though its steps all ended: {Counter(statuses)}")
        return problems

    def _ended_as_the_rule_says(self, before: Seen, after: Seen) -> list[str]:
        """A workflow that ended in this operation ended ``cancelled`` after a cancel,
        ``succeeded`` when every step did, else ``failed``; an ended one stays as it ended
        unless a retry runs it again."""
        if after.workflow_status is WorkflowStatus.RUNNING:
            return []
        if before.workflow_status is not WorkflowStatus.RUNNING:
            if after.workflow_status is before.workflow_status:
                return []
            return [f"workflow went {before.workflow_status} -> {after.workflow_status}"]
        statuses = [after.status(n) for n in range(len(self.dag))]
        cancel_requested = after.workflow[2]
        expected = (
            WorkflowStatus.CANCELLED
            if cancel_requested
            else WorkflowStatus.SUCCEEDED
            if all(s is S.SUCCEEDED for s in statuses)
            else WorkflowStatus.FAILED
        )
        if after.workflow_status is not expected:
            return [f"workflow ended {after.workflow_status.value}, expected {expected.value}"]
        return []

    def _track_dirty(self, op: Op, before: Seen, after: Seen) -> None:
        """A step that ended in an operation that runs no release leaves work to the sweep."""
        if op.kind == "sweep":
            self.dirty = False
            return
        releases = op.kind in ("cancel_workflow", "retry_workflow") or (
            op.kind == "end" and op["hook"]
        )
        ended = any(
            before.status(n) not in TERMINAL_STATUSES and after.status(n) in TERMINAL_STATUSES
            for n in range(len(self.dag))
        )
        if ended and not releases:
            self.dirty = True

    def _track_overtaken(self, op: Op, before: Seen, after: Seen) -> None:
        """A step running when a workflow retry ran a dependency again is overtaken until it
        ends (or waits again)."""
        if op.kind == "retry_workflow":
            self.overtaken.update(
                n
                for n in range(len(self.dag))
                if before.status(n) is S.RUNNING and self.decision(n, after) != "release"
            )
        self.overtaken -= {
            n for n in range(len(self.dag)) if after.status(n) in (*TERMINAL_STATUSES, S.WAITING)
        }
