"""A success is kept on the job row: no event and no attempt row are written for it.

A job that succeeds says nothing its row does not (the worker, the attempt, when it started
and finished), and most jobs succeed: the ``running -> succeeded`` event and the attempt row
were a third of the WAL a job's processing wrote. Both backends leave them out and read them
back from the row: ``get_events`` through ``with_success_event``, ``get_attempts`` and
``get_archived_attempts`` through ``with_success_attempt``, each row with id
``SUCCESS_ROW_ID`` (the PostgreSQL backend derives the same in SQL: ``get_events`` in
sql/jobs.sql). A success stored as rows before this rule is read as stored.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol
from uuid import UUID

from taskq_core.backend.protocol.values import AttemptRow, EventRow
from taskq_core.statemachine import JobStatus

# The id of an event or attempt read from the job row (stored rows count from 1).
SUCCESS_ROW_ID = 0


# Alike obs/gauges.py's _RunState and the _Client of client_batches.py and client_workflows.py
# by shape only: read-only Protocol properties, other members.
class SucceededJob(Protocol):
    """What the rows are read from: a job row, live or archived."""

    @property
    def id(self) -> UUID: ...
    @property
    def status(self) -> JobStatus: ...
    @property
    def attempt(self) -> int: ...
    @property
    def locked_by_worker(self) -> UUID | None: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def finished_at(self) -> datetime | None: ...


def with_success_event(job: SucceededJob | None, events: list[EventRow]) -> list[EventRow]:
    """``events``, then the success's event when ``job`` succeeded and none is stored."""
    if job is None or job.status is not JobStatus.SUCCEEDED or job.finished_at is None:
        return events
    if any(e.to_status is JobStatus.SUCCEEDED for e in events):
        return events
    event = EventRow(
        SUCCESS_ROW_ID,
        job.id,
        job.finished_at,
        "state_change",
        JobStatus.RUNNING,
        JobStatus.SUCCEEDED,
        job.locked_by_worker,
        {},
    )
    return [*events, event]


def with_success_attempt(job: SucceededJob | None, attempts: list[AttemptRow]) -> list[AttemptRow]:
    """``attempts``, then the success's attempt when ``job`` succeeded and none is stored."""
    if job is None or job.status is not JobStatus.SUCCEEDED or job.finished_at is None:
        return attempts
    if any(a.outcome == "succeeded" for a in attempts):
        return attempts
    started, finished = job.started_at, job.finished_at
    duration = None if started is None else (finished - started).total_seconds() * 1000.0
    attempt = AttemptRow(
        SUCCESS_ROW_ID,
        job.id,
        job.attempt,
        job.locked_by_worker,
        "succeeded",
        started,
        finished,
        duration,
        None,
        None,
        None,
    )
    return [*attempts, attempt]
