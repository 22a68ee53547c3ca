"""Records -> protocol rows, and the JSON codecs every pool connection gets."""

from __future__ import annotations

import json
import operator
from dataclasses import fields
from json.scanner import make_scanner
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg

from taskq_core.backend.protocol import (
    ActorConfigRow,
    AttemptRow,
    CancelFlag,
    EventRow,
    JobFilter,
    JobRow,
    JobSummary,
    QueueActivity,
    QueueRow,
    WorkerRow,
    from_values,
)
from taskq_core.backend.protocol.admin import OperatorLogEntry, QueuePause
from taskq_core.backend.protocol.batches import BatchRow, BatchStatus
from taskq_core.statemachine import JobStatus

from . import bulk

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_JOB_FIELDS = tuple(f.name for f in fields(JobRow))
_STATUS_INDEX = _JOB_FIELDS.index("status")
_JOB_STATUS = {status.value: status for status in JobStatus}
_TEXT_JSON_INDEXES = tuple(
    _JOB_FIELDS.index(name) for name in ("payload", "result", "metadata", "progress_state")
)
_SUMMARY_FIELDS = tuple(f.name for f in fields(JobSummary))  # the leading JobRow fields
# A record's values in field order, taken by name in one C call (a Python call per field
# cost three times as much: a dispatch converts every claimed row).
_job_values = operator.itemgetter(*_JOB_FIELDS)
_summary_values = operator.itemgetter(*_SUMMARY_FIELDS)
_RowT = TypeVar("_RowT", bound="DataclassInstance")
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # _row's, by row type


# --- JSON -----------------------------------------------------------------------------------
def _encode_jsonb(value: Any) -> bytes:
    return b"\x01" + bulk.dumps(value).encode()  # jsonb binary format: version byte, then text


_EMPTY_JSONB = b"\x01{}"  # the usual metadata
# The C scanner json.loads runs once it has skipped whitespace around the value, which
# PostgreSQL's jsonb text never has: 0.4 us for a small object instead of 1.0, once for every
# payload and again for a batch child's metadata.
_scan_value = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # duck-typed context


def _decode_jsonb(data: bytes) -> Any:
    if data == _EMPTY_JSONB:
        return {}
    text = data[1:].decode()  # text: json.loads of bytes detects the encoding first
    try:
        value, end = _scan_value(text, 0)
    except (StopIteration, ValueError):
        end = -1
    return value if end == len(text) else json.loads(text)  # json.loads says what is wrong


def _encode_json(value: Any) -> bytes:
    return bulk.dumps(value).encode()


async def init_connection(conn: asyncpg.Connection) -> None:
    """Pool connection set-up: JSON columns in and out as Python objects (binary format)."""
    await conn.set_type_codec(
        "jsonb",
        encoder=_encode_jsonb,
        decoder=_decode_jsonb,
        schema="pg_catalog",
        format="binary",
    )
    await conn.set_type_codec(
        "json", encoder=_encode_json, decoder=json.loads, schema="pg_catalog", format="binary"
    )


# --- records -> protocol rows ----------------------------------------------------------------
def job(record: asyncpg.Record) -> JobRow:
    """A ``jobs`` record as a JobRow (JSON columns already decoded by the pool codec)."""
    values = list(_job_values(record))
    values[_STATUS_INDEX] = _JOB_STATUS[values[_STATUS_INDEX]]
    return from_values(JobRow, values)


def job_summary(record: asyncpg.Record) -> JobSummary:
    """A listing's record (the job_summary_columns fragment) as a JobSummary."""
    values = list(_summary_values(record))
    values[_STATUS_INDEX] = _JOB_STATUS[values[_STATUS_INDEX]]
    return from_values(JobSummary, values)


def job_from_text_json(record: asyncpg.Record) -> JobRow:
    """A row whose JSON columns came back as text (the codec-independent enqueue queries)."""
    values = list(_job_values(record))
    values[_STATUS_INDEX] = _JOB_STATUS[values[_STATUS_INDEX]]
    for index in _TEXT_JSON_INDEXES:
        if values[index] is not None:
            values[index] = json.loads(values[index])
    return from_values(JobRow, values)


def _row(row_type: type[_RowT], record: asyncpg.Record, **given: Any) -> _RowT:
    """A ``row_type`` from the record's columns named as its fields; ``given`` holds the
    fields computed here or read from a column of another name."""
    names = _FIELD_NAMES.get(row_type)
    if names is None:
        names = _FIELD_NAMES[row_type] = tuple(f.name for f in fields(row_type))
    return row_type(**{name: given[name] if name in given else record[name] for name in names})


def attempt(record: asyncpg.Record) -> AttemptRow:
    """A ``job_attempts`` record as an AttemptRow."""
    return _row(AttemptRow, record)


def batch(record: asyncpg.Record) -> BatchRow:
    """A batch record (metadata as text, the finalizer's actor) as a BatchRow."""
    return _row(
        BatchRow,
        record,
        status=BatchStatus(record["status"]),
        metadata=json.loads(record["metadata"]),
    )


def cancel_flag(record: asyncpg.Record) -> CancelFlag:
    """A ``heartbeat`` or ``poll_cancel_flags`` record as a CancelFlag."""
    return CancelFlag(
        record["job_id"],
        record["cancel_phase"],
        record["cancel_requested_at"],
        record["cancel_reason"],
    )


def event(record: asyncpg.Record) -> EventRow:
    """A ``job_events`` record as an EventRow."""
    from_status, to_status = record["from_status"], record["to_status"]
    return _row(
        EventRow,
        record,
        from_status=None if from_status is None else JobStatus(from_status),
        to_status=None if to_status is None else JobStatus(to_status),
    )


def actor_config(record: asyncpg.Record) -> ActorConfigRow:
    """An ``actor_config`` record as an ActorConfigRow."""
    return _row(ActorConfigRow, record)


def _status_counts(statuses: list[str], counts: list[int]) -> dict[JobStatus, int]:
    """Parallel arrays of status names and counts as a dict by status."""
    return {JobStatus(status): count for status, count in zip(statuses, counts, strict=True)}


def status_counts(statuses: list[str], counts: list[int]) -> dict[JobStatus, int]:
    """Parallel arrays of status names and counts as a dict in JobStatus order."""
    found = _status_counts(statuses, counts)
    return {status: found[status] for status in JobStatus if status in found}


def operator_log_entry(record: asyncpg.Record) -> OperatorLogEntry:
    """A ``list_operator_log`` record as an OperatorLogEntry."""
    return _row(OperatorLogEntry, record, by=record["by_operator"])


def queue(record: asyncpg.Record) -> QueueRow:
    """A ``list_queues`` record as a QueueRow."""
    counts = _status_counts(record["statuses"], record["counts"])
    return _row(QueueRow, record, counts=counts, pause=_pause(record))


def _pause(record: asyncpg.Record) -> QueuePause | None:
    """The pause note of a paused queue's record (None when it runs or has no note)."""
    if not record["paused"] or record["paused_at"] is None:
        return None
    return QueuePause(record["paused_at"], record["paused_by"], record["pause_reason"])


def worker(record: asyncpg.Record) -> WorkerRow:
    """A ``list_workers`` record as a WorkerRow."""
    return _row(
        WorkerRow,
        record,
        label=record["worker_label"],
        queues=list(record["queues"]),
        actors=list(record["actors"]),
    )


def queue_activity(record: asyncpg.Record, minutes: int) -> QueueActivity:
    """A ``get_dashboard_stats`` record as a QueueActivity, its minutes oldest first."""
    per_minute = [0] * minutes
    for minute_ago, count in zip(record["minutes_ago"], record["minute_counts"], strict=True):
        per_minute[minutes - 1 - minute_ago] = count  # oldest first
    return _row(
        QueueActivity,
        record,
        finished=_status_counts(record["finished_statuses"], record["finished_counts"]),
        finished_per_minute=per_minute,
    )


def statuses(filter: JobFilter) -> list[str] | None:
    """The filter's statuses as the queries take them (None: any)."""
    allowed = filter.statuses()
    return None if allowed is None else sorted(s.value for s in allowed)


def filter_args(filter: JobFilter) -> tuple[Any, ...]:
    """($1 statuses, $2 queue, $3 actor, $4 ids, $5 limit) as the filter queries take them."""
    ids = None if filter.ids is None else list(filter.ids)
    return (statuses(filter), filter.queue, filter.actor, ids, filter.limit)
