"""Names in URL paths: every value put in a path segment goes through ``path_segment`` (the
``path_segment`` filter in templates, the same function in redirects), and a handler reads
a name back from its segment with ``segment_value``.

``path_segment`` leaves nothing safe: Jinja's ``urlencode`` and ``urllib.parse.quote`` keep
``/``, so the queue ``reports/../../api/queues/okq`` made a Resume button that a browser
resolved to ``/api/queues/okq/resume``. Encoded, the name stays one segment, and the
request guard (request_guard.py) routes on the path as the client sent it, so that segment
reaches the handler whole. New queue and schedule names are held to a character set that
needs no encoding (taskq_core/names.py); this is for the names stored before that.

A segment that is only dots is the one thing no encoding carries through a browser, which
treats ``%2E%2E`` as ``..``: such a name (refused at creation) is addressable by scripts,
not by clicks.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote, unquote_to_bytes


def path_segment(value: Any) -> str:
    """``value`` as one URL path segment: every character but letters, digits and ``_.-~``
    percent-encoded (``/`` too), and a segment of dots spelled ``%2E``."""
    text = str(value)
    if text and text.strip(".") == "":
        return "%2E" * len(text)
    return quote(text, safe="")


def segment_value(segment: str) -> str:
    """The name a path segment carries (the inverse of ``path_segment``)."""
    return unquote(segment)


def canonical_path(raw_path: bytes) -> str:
    """The path a request is routed on: its segments as the client sent them, each decoded
    and encoded again by ``path_segment``, so a ``%2F`` inside a segment does not split it
    (as the server's decoded path would) and equal paths are spelled alike."""
    path = raw_path.split(b"?", 1)[0]
    return "/".join(
        path_segment(unquote_to_bytes(part).decode("utf-8", "replace")) if part else ""
        for part in path.split(b"/")
    )
