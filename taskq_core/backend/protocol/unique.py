"""Unique jobs: the one home of the rules both backends apply to ``EnqueueArgs.unique_key``.

A key alone is held while its job waits or runs (``unique_until`` NULL). A key with
``unique_for`` is stored with the start of the window of now appended, windows of that length
aligned on the Unix epoch on the backend's clock, and is held in every state: ``unique_until``
(the window's end) only tells a refused caller when to try again. The Postgres ``enqueue``
statement (sql/jobs.sql) computes the same window and key text in SQL; the conformance suite
holds the two together.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from uuid import UUID

from taskq_core.errors import SingletonCollisionError
from taskq_core.statemachine import ACTIVE_STATUSES, JobStatus

if TYPE_CHECKING:
    from taskq_core.backend.protocol.values import EnqueueArgs

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_ZERO = timedelta(0)
# The index entry of a key must fit a btree page (about 2.7 kB): longer keys are refused
# before the database would refuse them with an index error.
MAX_KEY_BYTES = 1024


def check_unique(key: str | None, width: timedelta | None) -> None:
    """ValueError, in one line, for a unique_key / unique_for combination no backend stores."""
    if key is None:
        if width is not None:
            raise ValueError("unique_for needs a unique_key (the key each window holds)")
        return
    if not key.strip():
        raise ValueError("unique_key must not be empty")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise ValueError(f"unique_key is longer than {MAX_KEY_BYTES} bytes")
    if width is not None and width <= _ZERO:
        raise ValueError(f"unique_for must be a positive duration, got {width.total_seconds():g}s")


def window_start(now: datetime, width: timedelta) -> datetime:
    """The start of the window of length ``width`` that holds ``now``, windows aligned on the
    Unix epoch (``floor(epoch(now) / width) * width``), in UTC."""
    width_us = width // _MICROSECOND
    return _EPOCH + (now - _EPOCH) // _MICROSECOND // width_us * width_us * _MICROSECOND


def windowed_key(key: str, start: datetime) -> str:
    """The stored form of a windowed key: ``KEY@<window start, UTC ISO 8601>``."""
    return f"{key}@{start.astimezone(UTC).isoformat()}"


def stored_unique(args: EnqueueArgs, now: datetime) -> tuple[str | None, datetime | None]:
    """(unique_key, unique_until) as the row of ``args`` enqueued at ``now`` stores them."""
    if args.unique_key is None or args.unique_for is None:
        return args.unique_key, None
    start = window_start(now, args.unique_for)
    return windowed_key(args.unique_key, start), start + args.unique_for


def holds_key(status: JobStatus, unique_until: datetime | None) -> bool:
    """Whether a job with a unique key holds it (the unique index's predicate): a windowed
    key in every state, a plain one while the job waits or runs."""
    return unique_until is not None or status in ACTIVE_STATUSES


def retry_after(until: datetime | None, now: datetime) -> timedelta | None:
    """How long until the holder's window ends (None: no window, or it has ended)."""
    if until is None or until <= now:
        return None
    return until - now


def collision(
    key: str, holder_id: UUID | None, holder_until: datetime | None, now: datetime
) -> SingletonCollisionError:
    """The error for an enqueue refused because ``holder_id`` holds the caller's ``key``."""
    return SingletonCollisionError(key, holder_id, retry_after(holder_until, now))
