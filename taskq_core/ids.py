"""Time-ordered UUIDs (version 7, RFC 9562): job ids sort by creation time in btree indexes."""

from __future__ import annotations

import os
import threading
import time
from array import array
from uuid import UUID

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def uuid7() -> UUID:
    """A UUIDv7; ids made in one process are strictly increasing (12-bit counter per ms)."""
    global _last_ms, _counter
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            _last_ms, _counter = now_ms, int.from_bytes(os.urandom(2), "big") & 0x3FF
        else:
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted within one ms: borrow the next ms
                _last_ms, _counter = _last_ms + 1, 0
        ms, counter = _last_ms, _counter
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand_b
    return UUID(int=value)


def uuid7_batch(count: int) -> list[UUID]:
    """``count`` UUIDv7s, strictly increasing and after any id made before in this process.

    Same layout and ordering as ``uuid7``, but the time/counter slots are reserved under one
    lock and the random bits come from one ``os.urandom`` call: bulk enqueues mint ids at a
    fraction of the per-id cost.
    """
    return [UUID(int=value) for value in uuid7_batch_ints(count)]


def uuid7_batch_ints(count: int) -> list[int]:
    """``uuid7_batch`` as 128-bit integers: a bulk enqueue encodes most ids without a UUID."""
    global _last_ms, _counter
    if count <= 0:
        return []
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            first_ms, first_counter = now_ms, int.from_bytes(os.urandom(2), "big") & 0x3FF
        else:
            first_ms, first_counter = _last_ms, _counter + 1
        # Slot i is (first_ms, first_counter + i), carrying into the next ms past 0xFFF as
        # uuid7 does when a millisecond's counter runs out.
        last = first_counter + count - 1
        _last_ms, _counter = first_ms + (last >> 12), last & 0xFFF
    mask62 = (1 << 62) - 1
    version, variant = 0x7 << 76, 0b10 << 62
    return [
        ((first_ms + (slot >> 12)) & ((1 << 48) - 1)) << 80
        | version
        | (slot & 0xFFF) << 64
        | variant
        | (rand & mask62)
        for slot, rand in zip(
            range(first_counter, first_counter + count),
            array("Q", os.urandom(8 * count)),  # native 64-bit words, one per id
            strict=True,
        )
    ]


def parse_uuid(value: UUID | str) -> UUID | None:
    """``value`` as a UUID: as given, or parsed from its text; None when the text is not one."""
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        return None
