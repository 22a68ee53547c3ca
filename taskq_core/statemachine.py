"""The job state machine: statuses, the allowed transitions and the sets derived from them.

The PostgreSQL enum ``job_status`` mirrors JobStatus (a test checks they agree); the SQL
``WHERE status = ...`` predicates are the real serialization gate, this module is the
application-level guard both backends share.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from taskq_core.errors import InvalidTransitionError


class JobStatus(StrEnum):
    """Every status a job can be in."""

    PENDING = "pending"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    CRASHED = "crashed"
    ABANDONED = "abandoned"
    # A workflow step whose dependencies have not allowed it yet: dispatch never reads it.
    WAITING = "waiting"


VALID_TRANSITIONS: Final[dict[JobStatus, frozenset[JobStatus]]] = {
    JobStatus.WAITING: frozenset({JobStatus.PENDING, JobStatus.SCHEDULED, JobStatus.CANCELLED}),
    # -> waiting: a workflow retry takes back a released step not yet handed out whose
    # dependency it retries (a step that requires only its dependencies' end).
    JobStatus.PENDING: frozenset(
        {JobStatus.RUNNING, JobStatus.CANCELLED, JobStatus.FAILED, JobStatus.WAITING}
    ),
    JobStatus.SCHEDULED: frozenset(
        {JobStatus.PENDING, JobStatus.CANCELLED, JobStatus.FAILED, JobStatus.WAITING}
    ),
    JobStatus.RUNNING: frozenset(
        {
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
            JobStatus.CANCELLED,
            JobStatus.CRASHED,
            JobStatus.ABANDONED,
            JobStatus.SCHEDULED,
            # Reclaim of an expired lock with retries left, and re-pending a job that was
            # locked but never started (drain on shutdown).
            JobStatus.PENDING,
        }
    ),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
    JobStatus.CRASHED: frozenset(),
    JobStatus.ABANDONED: frozenset(),
}

TERMINAL_STATUSES: Final = frozenset(s for s, nxt in VALID_TRANSITIONS.items() if not nxt)
ACTIVE_STATUSES: Final = frozenset(JobStatus) - TERMINAL_STATUSES
# Operator retry re-pends these; succeeded and abandoned stay final.
RETRYABLE_STATUSES: Final = frozenset({JobStatus.FAILED, JobStatus.CRASHED, JobStatus.CANCELLED})


def parse_status(value: str) -> JobStatus:
    """Return the JobStatus named ``value`` or raise ValueError listing the valid ones."""
    try:
        return JobStatus(value)
    except ValueError:
        valid = ", ".join(s.value for s in JobStatus)
        raise ValueError(f"unknown status {value!r} (valid: {valid})") from None


def is_valid_transition(from_status: JobStatus, to_status: JobStatus) -> bool:
    """True when the state machine allows ``from_status -> to_status``."""
    return to_status in VALID_TRANSITIONS[from_status]


def assert_valid_transition(from_status: JobStatus, to_status: JobStatus, job_id: object) -> None:
    """Raise InvalidTransitionError unless ``from_status -> to_status`` is allowed."""
    if not is_valid_transition(from_status, to_status):
        raise InvalidTransitionError(
            f"job {job_id}: {from_status.value} -> {to_status.value} is not a valid transition"
        )
