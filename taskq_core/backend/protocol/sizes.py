"""How large a payload or a result may be: the one rule, applied where each is encoded.

A value is measured as the JSON text TaskQ stores it from (``jsontext.encode``: ASCII, so
its length is its size in bytes). Payloads are checked by the backends, the one funnel every
enqueue goes through (``enqueue``, ``enqueue_batch``, ``enqueue_batch_fast``, a batch's
finalizer, a cron schedule's payload), on the text they encode anyway: the check costs a
length. Results are checked by the worker, where an actor's return value is encoded once,
before any write: an oversized one fails its job as ``UnstorableResult``, so the completer
and the settle statement never carry it. The limits are TASKQ_MAX_PAYLOAD_BYTES and
TASKQ_MAX_RESULT_BYTES; a backend takes its payload limit when it is built.
"""

from __future__ import annotations

from typing import Any

from taskq_core import jsontext
from taskq_core.backend.protocol.values import EnqueueArgs
from taskq_core.constants import DEFAULT_MAX_PAYLOAD_BYTES
from taskq_core.errors import PayloadTooLargeError
from taskq_core.jsontext import UnstorableValueError

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "check_enqueue_payload",
    "check_payload",
    "check_payload_size",
    "check_result_size",
    "json_size",
    "payload_too_large",
]


def json_size(text: str) -> int:
    """Bytes of JSON text as stored (UTF-8; TaskQ's encoder writes ASCII, one byte a
    character)."""
    return len(text) if text.isascii() else len(text.encode())


def check_payload_size(actor: str, text: str, limit: int) -> None:
    """Refuse a payload whose JSON ``text`` is over ``limit`` bytes (PayloadTooLargeError,
    naming both sizes)."""
    if len(text) <= limit // 4:  # at most 4 bytes a character: surely within
        return
    size = json_size(text)
    if size > limit:
        raise payload_too_large(actor, size, limit)


def check_payload(actor: str, payload: Any, limit: int) -> str:
    """``payload`` as JSON text, refused when over ``limit`` (where a backend has no text
    of its own to measure: a batch's finalizer, a cron schedule's payload, the in-memory
    backend)."""
    text = jsontext.encode(payload)
    check_payload_size(actor, text, limit)
    return text


def check_enqueue_payload(args: EnqueueArgs, limit: int) -> str:
    """``check_payload`` for one item of an enqueue."""
    return check_payload(args.actor, args.payload, limit)


def payload_too_large(actor: str, size: int, limit: int) -> PayloadTooLargeError:
    """The refusal of a payload of ``size`` bytes over ``limit``: both sizes named."""
    return PayloadTooLargeError(
        f"payload of {actor!r} is {size:,} bytes as JSON, over the limit of {limit:,} bytes "
        "(TASKQ_MAX_PAYLOAD_BYTES); store large data elsewhere and enqueue its key",
        size=size,
        limit=limit,
    )


def check_result_size(text: str, limit: int) -> None:
    """Refuse a result whose JSON ``text`` is over ``limit`` bytes (UnstorableValueError:
    the worker fails the job with UnstorableResult)."""
    if len(text) <= limit // 4:
        return
    size = json_size(text)
    if size > limit:
        raise UnstorableValueError(
            f"too large to store: {size:,} bytes as JSON, over the limit of {limit:,} bytes "
            "(TASKQ_MAX_RESULT_BYTES)"
        )
