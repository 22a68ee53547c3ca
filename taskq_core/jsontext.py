"""JSON text as TaskQ stores it: the one encoder for payloads, metadata and results.

PostgreSQL's jsonb refuses NaN and Infinity and any string holding U+0000; Python's json
module writes the first two by default and escapes the third. Both backends store what this
encoder accepts and refuse the rest with the same error, so a value that cannot be stored
is found where it is made (an enqueue, an actor's return), never at a later write.
"""

from __future__ import annotations

import json
import re
from typing import Any

_ENCODER = json.JSONEncoder(allow_nan=False)
# A \u0000 escape: an even run of backslashes (escaped backslashes), then the escape itself.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class UnstorableValueError(ValueError):
    """A value that cannot be stored as JSON; the message says why, in one line."""


def encode(value: Any) -> str:
    """``value`` as JSON text; raises UnstorableValueError when it cannot be stored."""
    try:
        text = _ENCODER.encode(value)
    except ValueError as exc:  # NaN, Infinity, a circular reference
        raise UnstorableValueError(f"not storable as JSON: {exc}") from None
    except TypeError as exc:  # a type json does not know
        raise UnstorableValueError(f"not storable as JSON: {exc}") from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise UnstorableValueError("not storable as JSON: a string holds a NUL character (U+0000)")
    return text
