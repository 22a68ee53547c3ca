"""How a job's reported progress reads for an operator, in ``taskq jobs show`` and ``taskq top``.

The latest report stored on the job's row (``ProgressReport.of_row``): a bar and percentage
when the actor gave a total, the count and the message, and how long ago it was reported
(the worker's clock). No rich, typer or Textual here: the command and the dashboard both
render these values.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from taskq_core.backend.protocol import JobRow
from taskq_core.progress import ProgressReport

BAR_CELLS = 20


def progress_document(job: JobRow) -> dict[str, Any] | None:
    """The ``progress`` object of ``--json``: seq, current, total, message, ts (the worker's
    clock) and percent (None without a total); None when the job reported none."""
    report = ProgressReport.of_row(job)
    if report is None:
        return None
    return {
        "seq": report.seq,
        "current": report.current,
        "total": report.total,
        "percent": None if report.percent is None else round(report.percent, 1),
        "message": report.message,
        "ts": report.ts,
    }


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def bar(percent: float, cells: int = BAR_CELLS) -> str:
    """``[#####---------------]`` for ``percent`` (0 to 100)."""
    filled = round(percent / 100 * cells)
    return "[" + "#" * filled + "-" * (cells - filled) + "]"


def progress_line(job: JobRow, age: str | None = None) -> str | None:
    """``[########------------]  40% (4/10) resizing, 3s ago``; a report without a total
    reads ``4 done``; None when the job reported nothing. ``age``: how long ago the report
    was made, as the caller writes durations."""
    report = ProgressReport.of_row(job)
    if report is None:
        return None
    if report.percent is None or report.total is None:
        text = f"{_number(report.current)} done"
    else:
        whole = f"{_number(report.current)}/{_number(report.total)}"
        text = f"{bar(report.percent)} {report.percent:3.0f}% ({whole})"
    if report.message:
        text += f" {report.message}"
    if age is not None:
        text += f", {age} ago"
    return text


def reported_at(job: JobRow) -> datetime | None:
    """When the stored report was made (the worker's clock), None without one."""
    report = ProgressReport.of_row(job)
    return None if report is None else report.ts
