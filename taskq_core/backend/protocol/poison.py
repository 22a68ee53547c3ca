"""Poison jobs: what counts as a worker dying while running a job, and the error a job gets
when that happened TASKQ_POISON_RECLAIMS times.

The reclaim sweep counts a job's 'lock_expired' reclaims whose body's start was recorded,
since its last operator retry. No crash: an operator's requeue, a reclaim of a job whose body
never started, nor one that only counts as started because it was reclaimed unstarted
UNSTARTED_RECLAIM_LIMIT times (its event says ``start_assumed``): a job prefetched by workers
that kept dying of another job looks just like that. A body that kills its worker before
the batched start mark is written is still caught: its unstarted reclaim counts in
``JobRow.unstarted_reclaims``, and a worker that claims a job with a count records its start
before the body runs, so its later deaths are crashes.
The memory backend and ``jobs explain`` read the rule here; PostgreSQL writes the same rule
and message in ``sql/settle.sql``, held to this one by ``tests/conformance/test_poison.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

from taskq_core.backend.protocol.values import ErrorInfo, JobRow
from taskq_core.constants import POISON_JOB_ERROR
from taskq_core.statemachine import JobStatus


class _Event(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def detail(self) -> dict[str, Any]: ...


def is_worker_crash(event: _Event) -> bool:
    """A reclaim of a job whose body's start was recorded and whose lease ran out: its
    worker died running it."""
    return (
        event.kind == "reclaim"
        and event.detail.get("reason") == "lock_expired"
        and event.detail.get("started") is True
        and "start_assumed" not in event.detail
    )


E = TypeVar("E", bound=_Event)


def worker_crashes(events: Iterable[E]) -> list[E]:
    """The crash events (``is_worker_crash``) of one job's events, oldest first, since its
    last operator retry: what the poison count counts."""
    crashes: list[E] = []
    for event in events:
        if event.detail.get("reason") == "operator_retry":
            crashes = []
        elif is_worker_crash(event):
            crashes.append(event)
    return crashes


def poison_error(crashes: int, limit: int) -> ErrorInfo:
    """The error of a job failed as poison after ``crashes`` crashes (limit ``limit``)."""
    message = (
        f"{crashes} workers died running it (TASKQ_POISON_RECLAIMS is {limit}); "
        "not handed out again"
    )
    return ErrorInfo(POISON_JOB_ERROR, message)


def is_poison(job: JobRow) -> bool:
    """Whether the reclaim sweep failed ``job`` as a poison job."""
    return job.status is JobStatus.FAILED and job.error_class == POISON_JOB_ERROR
