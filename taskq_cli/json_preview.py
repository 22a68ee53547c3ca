"""Bounded previews of a job's JSON values (payload, result) on the operator's screens.

A payload is as large as TASKQ_MAX_PAYLOAD_BYTES allows (a row written before the limit, or
under a raised one, larger), and a screen that prints it whole floods the terminal or makes
a page of megabytes. ``jobs show``, the job page and the dashboard's detail show the first
PREVIEW_CHARS characters and the value's size; the whole value is one step away: ``taskq
jobs show ID --full``, ``--json``, and the page's download links (``/jobs/ID/payload``,
``/jobs/ID/result``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# How much of a value a screen shows.
PREVIEW_CHARS = 2000


@dataclass(frozen=True, slots=True)
class JsonPreview:
    """What a screen shows of a value: ``text`` (all of it, or its first characters when
    ``truncated``) and ``size``, the bytes of its JSON as stored."""

    text: str
    size: int
    truncated: bool

    def note(self, full: str) -> str:
        """The line under a cut preview: how much is shown, and ``full``, where the rest is."""
        return f"first {len(self.text):,} characters of {self.size:,} bytes; {full}"


def json_size(value: Any) -> int:
    """Bytes of ``value``'s JSON as TaskQ stores it (ASCII, default separators)."""
    return len(json.dumps(value, default=str))


def preview_json(
    value: Any, *, indent: int | None = None, limit: int = PREVIEW_CHARS
) -> JsonPreview:
    """``value`` as JSON text (sorted keys; ``indent`` for a block), cut at ``limit``
    characters."""
    text = json.dumps(value, indent=indent, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) <= limit:
        return JsonPreview(text, json_size(value), truncated=False)
    return JsonPreview(text[:limit], json_size(value), truncated=True)


def whole_json(value: Any, *, indent: int | None = None) -> JsonPreview:
    """All of ``value`` as JSON text (``--full``), in the preview's shape."""
    text = json.dumps(value, indent=indent, sort_keys=True, ensure_ascii=False, default=str)
    return JsonPreview(text, json_size(value), truncated=False)
