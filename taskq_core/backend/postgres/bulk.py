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
from datetime import UTC, datetime, timedelta
from typing import Any

from taskq_core import jsontext
from taskq_core.backend.protocol import EnqueueArgs

# The columns a bulk enqueue writes, in row order: first the values of each row's own, then
# those a row shares with the other items of its batch that have the same options (encoded
# once, see RowEncoder). Every other column takes its default.
COLUMNS = (
    "id",
    "payload",
    "metadata",
    "actor",
    "queue",
    "status",
    "scheduled_at",
    "priority",
    "created_at",
    "updated_at",
    "identity_key",
    "fairness_key",
    "schedule_to_close",
    "retry_kind",
    "max_attempts",
    "result_ttl",
    "trace_id",
    "span_id",
)

HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags 0, no header extension
TRAILER = b"\xff\xff"
_FIELD_COUNT = struct.pack(">h", len(COLUMNS))
_NULL = b"\xff\xff\xff\xff"
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_ZERO = timedelta(0)
_ROW_HEAD = _FIELD_COUNT + struct.pack(">i", 16)  # the field count, then the id's length
_pack_length = struct.Struct(">i").pack
_pack_int4 = struct.Struct(">ii").pack
_pack_int8 = struct.Struct(">iq").pack
_pack_interval = struct.Struct(">iqii").pack

# JSON text as jsonb stores it: NaN, NUL and non-JSON values raise UnstorableValueError.
dumps = jsontext.encode


# The common empty payload / metadata: a constant field, nothing to serialize.
_EMPTY_OBJECT = _pack_length(3) + b"\x01{}"


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
    return json.loads(field[5:])


def _text(value: str) -> bytes:
    data = value.encode()
    return _pack_length(len(data)) + data


def _optional_text(value: str | None) -> bytes:
    return _NULL if value is None else _text(value)


def _interval(value: timedelta) -> bytes:
    # As asyncpg sends a timedelta: days stay days (never folded into the time part).
    return _pack_interval(16, value.seconds * 1_000_000 + value.microseconds, value.days, 0)


# The EnqueueArgs fields of a row's shared columns, in column order: the key of its encoding.
_shared_fields = operator.attrgetter(
    "actor",
    "queue",
    "delay",
    "priority",
    "identity_key",
    "fairness_key",
    "schedule_to_close",
    "retry_kind",
    "max_attempts",
    "result_ttl",
    "trace_id",
    "span_id",
)


class RowEncoder:
    """Encodes a batch's rows; every time is ``now`` (the DB clock) + an offset.

    A row is its id, its two JSON fields and the encoding of its shared columns, looked up by
    their values: the items of a bulk enqueue mostly share them all, so that part is encoded
    once per batch. The cache lives as long as the encoder.
    """

    def __init__(self, now: datetime) -> None:
        self._now_us = (now - _PG_EPOCH) // _MICROSECOND
        self._now_field = _pack_int8(8, self._now_us)
        self._shared: dict[tuple[Any, ...], bytes] = {}

    def row(self, args: EnqueueArgs, job_id: int, payload: bytes, metadata: bytes) -> bytes:
        """One COPY row (``job_id``: the UUID as an int; ``payload``, ``metadata``: fields)."""
        key = _shared_fields(args)
        shared = self._shared.get(key)
        if shared is None:
            shared = self._shared[key] = self._encode_shared(*key)
        return b"".join((_ROW_HEAD, job_id.to_bytes(16, "big"), payload, metadata, shared))

    def _encode_shared(
        self,
        actor: str,
        queue: str,
        delay: timedelta | None,
        priority: int,
        identity_key: str | None,
        fairness_key: str | None,
        schedule_to_close: timedelta | None,
        retry_kind: str,
        max_attempts: int,
        result_ttl: timedelta | None,
        trace_id: str | None,
        span_id: str | None,
    ) -> bytes:
        delayed = delay is not None and delay > _ZERO
        return b"".join(
            (
                _text(actor),
                _text(queue),
                _text("scheduled" if delayed else "pending"),
                self._time(delay if delayed else None),  # scheduled_at
                _pack_int4(4, priority),
                self._now_field,  # created_at
                self._now_field,  # updated_at
                _optional_text(identity_key),
                _optional_text(fairness_key),
                _NULL if schedule_to_close is None else self._time(schedule_to_close),
                _text(retry_kind),
                _pack_int4(4, max_attempts),
                _NULL if result_ttl is None else _interval(result_ttl),
                _optional_text(trace_id),
                _optional_text(span_id),
            )
        )

    def _time(self, offset: timedelta | None) -> bytes:
        """A timestamptz field: ``now`` plus ``offset``."""
        if offset is None:
            return self._now_field
        return _pack_int8(8, self._now_us + offset // _MICROSECOND)
