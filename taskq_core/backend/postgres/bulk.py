"""Bulk enqueue: ``jobs`` rows in PostgreSQL's binary COPY format, encoded here.

asyncpg's ``copy_records_to_table`` runs every value of every row through its codecs (a UUID,
three timestamps, two JSON documents and a dozen more columns per job). A bulk enqueue repeats
the same actor, queue, times and options row after row, so this encoder turns each distinct
set of them into wire bytes once per batch, and a row is its own id and JSON plus that cached
piece. The bytes depend on no connection codec: TaskQ's connections and a caller's take
the same path.

Binary COPY format (PostgreSQL docs, "COPY", "Binary Format"): an 11-byte signature, a flags
word and a header-extension length; per row a 16-bit field count, then per field a 32-bit length
(-1 for NULL) and the type's binary send format; a 16-bit -1 trailer.
"""

from __future__ import annotations

import json
import operator
import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from taskq_core import jsontext
from taskq_core.backend.protocol import EnqueueArgs, JobRow, from_values, start_time
from taskq_core.backend.protocol.unique import stored_unique
from taskq_core.statemachine import JobStatus

HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags 0, no header extension
TRAILER = b"\xff\xff"
_NULL = b"\xff\xff\xff\xff"
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_pack_length = struct.Struct(">i").pack
_pack_int4 = struct.Struct(">ii").pack
_pack_int8 = struct.Struct(">iq").pack
_pack_interval = struct.Struct(">iqii").pack

# JSON text as jsonb stores it: NaN, NUL and non-JSON values raise UnstorableValueError.
dumps = jsontext.encode


# The common empty payload / metadata: a constant field, nothing to serialize.
_EMPTY_OBJECT = _pack_length(3) + b"\x01{}"
# A jsonb field's bytes before its JSON text: the length word and the jsonb version byte.
JSONB_FIELD_HEAD = 5


def jsonb_field(value: Any) -> bytes:
    """One JSON value as a COPY field: length, jsonb version byte, JSON text."""
    if type(value) is dict and not value:
        return _EMPTY_OBJECT
    data = dumps(value).encode()
    return _pack_length(len(data) + 1) + b"\x01" + data


def jsonb_field_value(field: bytes) -> Any:
    """The Python value a ``jsonb_field`` holds (a fresh object, as a stored row would give)."""
    if field is _EMPTY_OBJECT:
        return {}
    return json.loads(field[JSONB_FIELD_HEAD:])


def _text(value: str) -> bytes:
    data = value.encode()
    return _pack_length(len(data)) + data


def _interval(value: timedelta) -> bytes:
    # As asyncpg sends a timedelta: days stay days (never folded into the time part).
    return _pack_interval(16, value.seconds * 1_000_000 + value.microseconds, value.days, 0)


def _status(value: JobStatus) -> bytes:
    return _text(value.value)


def _int4(value: int) -> bytes:
    return _pack_int4(4, value)


def _timestamp(value: datetime) -> bytes:
    return _pack_int8(8, (value - _PG_EPOCH) // _MICROSECOND)


def _optional(encode: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    return lambda value: _NULL if value is None else encode(value)


def _scheduled_at(args: EnqueueArgs, now: datetime) -> datetime:
    start = start_time(args, now)
    return now if start is None else start


@dataclass(frozen=True, slots=True)
class Column:
    """A ``jobs`` column a bulk enqueue writes: the value an item gives it (at the batch's
    clock reading ``now``) and its binary COPY field."""

    name: str
    value: Callable[[EnqueueArgs, datetime], Any]
    encode: Callable[[Any], bytes]


# THE table of a bulk enqueue's columns, in COPY row order: COLUMNS (the COPY call), the
# encoder's fields and the JobRow a batch returns all come from it. A row's own values (id,
# payload, metadata: encoded per row) come first; every other column's value depends only on
# the item's options, so its encoding is shared by the batch's items with the same options.
# Every column not listed takes its default.
OWN_COLUMNS = ("id", "payload", "metadata")
SHARED_COLUMNS = (
    Column("actor", lambda a, now: a.actor, _text),
    Column("queue", lambda a, now: a.queue, _text),
    Column(
        "status",
        lambda a, now: (
            JobStatus.WAITING
            if a.waiting
            else JobStatus.PENDING
            if start_time(a, now) is None
            else JobStatus.SCHEDULED
        ),
        _status,
    ),
    Column("scheduled_at", _scheduled_at, _timestamp),
    Column("priority", lambda a, now: a.priority, _int4),
    Column("created_at", lambda a, now: now, _timestamp),
    Column("updated_at", lambda a, now: now, _timestamp),
    Column("identity_key", lambda a, now: a.identity_key, _optional(_text)),
    Column("fairness_key", lambda a, now: a.fairness_key, _optional(_text)),
    Column(
        "schedule_to_close",
        lambda a, now: None if a.schedule_to_close is None else now + a.schedule_to_close,
        _optional(_timestamp),
    ),
    Column("retry_kind", lambda a, now: a.retry_kind, _text),
    Column("max_attempts", lambda a, now: a.max_attempts, _int4),
    Column("result_ttl", lambda a, now: a.result_ttl, _optional(_interval)),
    Column("trace_id", lambda a, now: a.trace_id, _optional(_text)),
    Column("span_id", lambda a, now: a.span_id, _optional(_text)),
    Column("unique_key", lambda a, now: stored_unique(a, now)[0], _optional(_text)),
    Column("unique_until", lambda a, now: stored_unique(a, now)[1], _optional(_timestamp)),
)
COLUMNS = OWN_COLUMNS + tuple(column.name for column in SHARED_COLUMNS)
_FIELD_COUNT = struct.pack(">h", len(COLUMNS))
_ROW_HEAD = _FIELD_COUNT + struct.pack(">i", 16)  # the field count, then the id's length

# The shared columns depend on every option of an item, that is every EnqueueArgs field but
# the row's own: those fields' values are the key of a shared encoding.
_options = operator.attrgetter(
    *(f.name for f in fields(EnqueueArgs) if f.name not in ("job_id", "payload", "metadata"))
)

# A returned JobRow: the schema's defaults for every column a bulk enqueue does not write.
_JOB_FIELDS = tuple(f.name for f in fields(JobRow))
_DEFAULTS = {
    "attempt": 0,
    "cancel_phase": 0,
    "progress_seq": 0,
    "unstarted_reclaims": 0,
    "uncounted_attempts": 0,
}
_ROW_TEMPLATE = [_DEFAULTS.get(name) for name in _JOB_FIELDS]
_SHARED_INDEXES = tuple(_JOB_FIELDS.index(column.name) for column in SHARED_COLUMNS)
_ID, _PAYLOAD, _METADATA = (_JOB_FIELDS.index(name) for name in OWN_COLUMNS)
_UNIQUE_KEY, _UNIQUE_UNTIL = (_JOB_FIELDS.index(name) for name in ("unique_key", "unique_until"))


class RowEncoder:
    """Encodes a batch's rows (and builds their JobRows); every time is ``now`` (the DB
    clock) + an offset.

    A row is its id, its two JSON fields and the encoding of its shared columns, looked up by
    the item's options: the items of a bulk enqueue mostly share them all, so that part (and
    the JobRow values it stands for) is computed once per batch. The cache lives as long as
    the encoder.
    """

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._shared: dict[tuple[Any, ...], tuple[bytes, list[Any]]] = {}

    def _shared_part(self, args: EnqueueArgs) -> tuple[bytes, list[Any]]:
        key = _options(args)
        shared = self._shared.get(key)
        if shared is None:
            values = [column.value(args, self.now) for column in SHARED_COLUMNS]
            encoded = b"".join(
                column.encode(value) for column, value in zip(SHARED_COLUMNS, values, strict=True)
            )
            template = list(_ROW_TEMPLATE)
            for index, value in zip(_SHARED_INDEXES, values, strict=True):
                template[index] = value
            shared = self._shared[key] = (encoded, template)
        return shared

    def row(self, args: EnqueueArgs, job_id: int, payload: bytes, metadata: bytes) -> bytes:
        """One COPY row (``job_id``: the UUID as an int; ``payload``, ``metadata``: fields)."""
        encoded, _ = self._shared_part(args)
        return b"".join((_ROW_HEAD, job_id.to_bytes(16, "big"), payload, metadata, encoded))

    def unique(self, args: EnqueueArgs) -> tuple[str | None, datetime | None]:
        """(unique_key, unique_until) as the item's row stores them."""
        _, template = self._shared_part(args)
        return template[_UNIQUE_KEY], template[_UNIQUE_UNTIL]

    def job_row(self, args: EnqueueArgs, job_id: UUID, payload: bytes, metadata: bytes) -> JobRow:
        """The row the item became: the table's values, the row's own, the defaults (the
        JSON columns decoded from the very fields the COPY carried)."""
        _, template = self._shared_part(args)
        values = list(template)
        values[_ID] = job_id
        values[_PAYLOAD] = jsonb_field_value(payload)
        values[_METADATA] = jsonb_field_value(metadata)
        return from_values(JobRow, values)
