"""Poison jobs: when a worker's death is blamed on a job, and the error a job gets when
TASKQ_POISON_RECLAIMS deaths in a row were.

A worker that dies takes every body it ran with it, but at most one of them killed it. The
reclaim sweep blames a death on a job only with evidence: its body's start was recorded and
no other body of that worker started after it (a job that kills its worker at once, or one
that ran alone); its reclaim event says ``blamed``. A kill storm that ends workers at random
so blames one job per death at most, and rarely the same one again; a poison job is blamed
every time. The count is of blamed reclaims in a row: since the job's last operator retry
and since its last started reclaim that was not blamed on it. No crash at all: an operator's
requeue, a reclaim of a job whose body never started, or one that only counts as started
because it was reclaimed unstarted UNSTARTED_RECLAIM_LIMIT times (``start_assumed``). A body
that kills its worker before the batched start mark is written is still caught: its
unstarted reclaim counts in ``JobRow.unstarted_reclaims``, and a worker that claims a job
with a count records its start before the body runs, so its later deaths are blamed.

A blamed job goes back a microsecond ahead of the other bodies its worker died with
(``BLAMED_AHEAD``; they go back due now, at the back of the queue). Those are reclaimed
together, so a worker claims them together and starts them in queue order: without the
step, the member that started last would start last again, and a kill storm whose cadence
meets the reclaims (one kill every 2 s, leases of 3 s) blamed one healthy job three times
in a row. Ahead of them it starts first: a poison job still kills its worker before another
starts, and a death that is not its doing falls on a body started after it.
The memory backend and ``jobs explain`` read the rule here; PostgreSQL writes the same rule
and message in ``sql/settle.sql``, held to this one by ``tests/conformance/test_poison.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from taskq_core.backend.protocol.values import ErrorInfo, JobRow
from taskq_core.constants import POISON_JOB_ERROR
from taskq_core.statemachine import JobStatus

# How far ahead of the other bodies of its dead worker a blamed job goes back (see above);
# sql/settle.sql writes the same interval.
BLAMED_AHEAD = timedelta(microseconds=1)


class _Event(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def detail(self) -> dict[str, Any]: ...


def is_worker_crash(event: _Event) -> bool:
    """A reclaim that blamed its worker's death on the job."""
    return event.kind == "reclaim" and event.detail.get("blamed") is True


def _breaks_the_row(event: _Event) -> bool:
    """An operator retry, or a death of a worker running the job not blamed on it."""
    if event.detail.get("reason") == "operator_retry":
        return True
    return event.kind == "reclaim" and event.detail.get("started") is True


E = TypeVar("E", bound=_Event)


def worker_crashes(events: Iterable[E]) -> list[E]:
    """The crashes blamed on one job in a row (``is_worker_crash``), oldest first, from its
    events in order: what the poison count counts."""
    crashes: list[E] = []
    for event in events:
        if is_worker_crash(event):
            crashes.append(event)
        elif _breaks_the_row(event):
            crashes = []
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
