"""Bulk enqueue: ``jobs`` rows in PostgreSQL's binary COPY format, encoded here.

asyncpg's ``copy_records_to_table`` runs every value of every row through its codecs (a UUID,
three timestamps, two JSON documents and a dozen more columns per job). A bulk enqueue repeats
the same actor, queue, times and options row after row, so this encoder turns each distinct
value into its wire bytes once per batch, and a row is one join of cached pieces plus its own
id and JSON. The bytes depend on no connection codec: TaskQ's connections and a caller's take
the same path.

Binary COPY format (PostgreSQL docs, "COPY", "Binary Format"): an 11-byte signature, a flags
word and a header-extension length; per row a 16-bit field count, then per field a 32-bit length
(-1 for NULL) and the type's binary send format; a 16-bit -1 trailer.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from taskq_core.backend.protocol import EnqueueArgs

# The columns a bulk enqueue writes, in row order; every other column takes its default.
COLUMNS = (
    "id",
    "actor",
    "queue",
    "payload",
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
    "metadata",
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
_UUID_LENGTH = struct.pack(">i", 16)
_pack_length = struct.Struct(">i").pack
_pack_int4 = struct.Struct(">ii").pack
_pack_int8 = struct.Struct(">iq").pack
_pack_interval = struct.Struct(">iqii").pack

# json.dumps(value, allow_nan=False), with the encoder built once instead of on every call.
_JSON_ENCODER = json.JSONEncoder(allow_nan=False)


def dumps(value: Any) -> str:
    """JSON text as jsonb stores it; NaN and non-JSON values raise (as they would in PG)."""
    return _JSON_ENCODER.encode(value)


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


def _interval(value: timedelta) -> bytes:
    # As asyncpg sends a timedelta: days stay days (never folded into the time part).
    return _pack_interval(16, value.seconds * 1_000_000 + value.microseconds, value.days, 0)


class RowEncoder:
    """Encodes a batch's rows slice by slice; every time is ``now`` (the DB clock) + an offset.

    Each distinct text, number and time offset is encoded once per batch (a bulk enqueue
    mostly repeats them), and the cache lives as long as the encoder, across slices.
    """

    def __init__(self, now: datetime) -> None:
        self._now_us = (now - _PG_EPOCH) // _MICROSECOND
        self._now_field = _pack_int8(8, self._now_us)
        self._texts: dict[str, bytes] = {}
        self._ints: dict[int, bytes] = {}
        # delay -> (status, scheduled_at); deadline -> schedule_to_close; ttl -> result_ttl
        self._starts: dict[timedelta | None, bytes] = {None: _text("pending") + self._now_field}
        self._deadlines: dict[timedelta | None, bytes] = {None: _NULL}
        self._ttls: dict[timedelta | None, bytes] = {None: _NULL}

    def _text(self, value: str | None) -> bytes:
        if value is None:
            return _NULL
        piece = self._texts.get(value)
        if piece is None:
            piece = self._texts[value] = _text(value)
        return piece

    def _int4(self, value: int) -> bytes:
        piece = self._ints.get(value)
        if piece is None:
            piece = self._ints[value] = _pack_int4(4, value)
        return piece

    def _start(self, delay: timedelta | None) -> bytes:
        piece = self._starts.get(delay)
        if piece is None:
            assert delay is not None
            piece = self._starts[delay] = (
                _text("scheduled") + _pack_int8(8, self._now_us + delay // _MICROSECOND)
                if delay > _ZERO
                else self._starts[None]
            )
        return piece

    def _deadline(self, offset: timedelta | None) -> bytes:
        piece = self._deadlines.get(offset)
        if piece is None:
            assert offset is not None
            piece = self._deadlines[offset] = _pack_int8(8, self._now_us + offset // _MICROSECOND)
        return piece

    def _ttl(self, ttl: timedelta | None) -> bytes:
        piece = self._ttls.get(ttl)
        if piece is None:
            assert ttl is not None
            piece = self._ttls[ttl] = _interval(ttl)
        return piece

    def rows(
        self,
        args_list: Sequence[EnqueueArgs],
        ids: Sequence[UUID],
        payloads: Sequence[bytes],
        metadatas: Sequence[bytes],
    ) -> bytes:
        """The COPY rows of one slice (``payloads``, ``metadatas``: ``jsonb_field``s)."""
        text, int4, now_field = self._text, self._int4, self._now_field
        parts: list[bytes] = []
        extend = parts.extend
        for args, job_id, payload, metadata in zip(
            args_list, ids, payloads, metadatas, strict=True
        ):
            extend(
                (
                    _FIELD_COUNT,
                    _UUID_LENGTH,
                    job_id.bytes,
                    text(args.actor),
                    text(args.queue),
                    payload,
                    self._start(args.delay),  # status and scheduled_at
                    int4(args.priority),
                    now_field,  # created_at
                    now_field,  # updated_at
                    text(args.identity_key),
                    text(args.fairness_key),
                    self._deadline(args.schedule_to_close),
                    text(args.retry_kind),
                    int4(args.max_attempts),
                    self._ttl(args.result_ttl),
                    metadata,
                    text(args.trace_id),
                    text(args.span_id),
                )
            )
        return b"".join(parts)
