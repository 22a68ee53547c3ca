"""Job progress: what an actor reports (``ctx.report_progress``), how it is stored and sent.

A report is ``current`` out of an optional ``total``, with an optional message. Each report
of a job gets the next ``seq`` (it keeps growing across attempts: a new attempt goes on from
the seq its row holds). The job's row keeps the latest report written (``progress_seq`` and
``progress_state``, written at most every TASKQ_PROGRESS_FLUSH_INTERVAL); with TASKQ_REDIS_URL
every report is also published on the job's channel (``progress_channel``) as one JSON object
``{job_id, seq, current, total, message, ts}``. ``ts`` is the reporting worker's clock: it is
shown, never compared. See docs/progress.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from taskq_core.constants import validate_identifier

if TYPE_CHECKING:
    from taskq_core.backend.protocol.values import JobRow

# A longer message is cut to this many characters (a progress line, not a log).
MAX_MESSAGE_CHARS = 1000
# progress_seq is a PostgreSQL integer: a job stops storing reports past this many.
MAX_SEQ = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """One progress report of a job."""

    job_id: UUID
    seq: int
    current: float
    total: float | None
    message: str | None
    ts: datetime

    @property
    def percent(self) -> float | None:
        """``current`` as a percentage of ``total`` (0 to 100), None without a total."""
        if self.total is None:
            return None
        return min(100.0, max(0.0, self.current / self.total * 100.0))

    def state(self) -> dict[str, Any]:
        """The ``progress_state`` column's value (the seq is its own column)."""
        return {
            "current": self.current,
            "total": self.total,
            "message": self.message,
            "ts": self.ts.isoformat(),
        }

    def document(self) -> dict[str, Any]:
        """The report as one JSON-ready object, as Redis subscribers receive it."""
        return {
            "job_id": str(self.job_id),
            "seq": self.seq,
            "current": self.current,
            "total": self.total,
            "message": self.message,
            "ts": self.ts.isoformat(),
        }

    def encode(self) -> str:
        """The message published on the job's channel."""
        return json.dumps(self.document(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def of_row(cls, job: JobRow) -> ProgressReport | None:
        """The latest report stored on a job's row; None when it has none (or a state this
        module did not write)."""
        if job.progress_seq <= 0 or not isinstance(job.progress_state, dict):
            return None
        return _parse(job.id, job.progress_seq, job.progress_state)

    @classmethod
    def decode(cls, data: str | bytes) -> ProgressReport | None:
        """A report from a channel message; None for anything else on the channel."""
        try:
            document = json.loads(data)
            return _parse(UUID(document["job_id"]), int(document["seq"]), document)
        except (ValueError, TypeError, KeyError):
            return None


def _parse(job_id: UUID, seq: int, state: dict[str, Any]) -> ProgressReport | None:
    try:
        current, total, message = check_progress(
            state.get("current"), state.get("total"), state.get("message")
        )
        ts = datetime.fromisoformat(state["ts"])
    except (ValueError, TypeError, KeyError):
        return None
    return ProgressReport(job_id, seq, current, total, message, ts)


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"progress {name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"progress {name} must be finite, got {value!r}")
    return value


def check_progress(
    current: Any, total: Any = None, message: Any = None
) -> tuple[float, float | None, str | None]:
    """The report's values as stored: numbers checked (TypeError, ValueError), a message cut
    to MAX_MESSAGE_CHARS and cleared of NUL characters (which JSON in PostgreSQL refuses)."""
    value = _number(current, "current")
    whole: float | None = None
    if total is not None:
        whole = _number(total, "total")
        if whole <= 0:
            raise ValueError(f"progress total must be positive, got {total!r}")
    text: str | None = None
    if message is not None:
        if not isinstance(message, str):
            raise TypeError(f"progress message must be a string, got {type(message).__name__}")
        text = message.replace("\x00", "")[:MAX_MESSAGE_CHARS]
    return value, whole, text


def progress_channel(schema: str, job_id: UUID) -> str:
    """The Redis channel of one job's reports: ``taskq:<schema>:progress:<job_id>`` (two
    schemas sharing one Redis never mix their jobs)."""
    return f"taskq:{validate_identifier(schema)}:progress:{job_id}"
