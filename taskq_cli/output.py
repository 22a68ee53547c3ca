"""Rendering: rich tables for humans, one JSON document for scripts, one-line errors on stderr.

Colours follow rich's detection: off when stdout is not a terminal or ``NO_COLOR`` is set.
Everything human goes through ``terminal_safe`` (``taskq_core.terminal_text``) here: every
table cell, header and title, every ``info``/``note``/``warn``/``error`` line (so every
``print_fields`` value), control characters shown escaped; both consoles are
TerminalConsoles, which drop any that a hand-built renderable still carries. JSON is exact.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Annotated, Any, Literal
from uuid import UUID

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from taskq_cli.terminal_rich import TerminalConsole, safe_text
from taskq_core.backend.protocol import JobSummary
from taskq_core.errors import ConfigError
from taskq_core.terminal_text import terminal_safe

stdout = TerminalConsole(soft_wrap=True)
stderr = TerminalConsole(stderr=True, soft_wrap=True)
_PIPE_WIDTH = 10_000
_DASH = Text("-", style="dim")


def to_jsonable(value: Any) -> Any:
    """Convert rows and values into JSON-ready data: ISO-8601 times, string UUIDs."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "model_dump"):
        return to_jsonable(value.model_dump())
    if hasattr(value, "__dataclass_fields__"):
        return to_jsonable({f: getattr(value, f) for f in value.__dataclass_fields__})
    return value


def print_json(document: Any) -> None:
    """Write exactly one JSON document to stdout."""
    sys.stdout.write(json.dumps(to_jsonable(document), indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


ColumnKind = Literal["id", "number", "text"]


@dataclass(frozen=True)
class Column:
    """A table column and how it may give way on a narrow terminal.

    ``kind``: ``id`` and ``number`` cells are never cut or wrapped (an operator copies them);
    ``text`` cells wrap. ``drop``: 0 keeps the column at any width; otherwise, when the
    table does not fit, columns are dropped highest ``drop`` first (after the ones whose
    every cell is empty or zero). A plain string column is text, or an id/number column
    when every cell is a UUID/number.
    """

    name: str
    kind: ColumnKind = "text"
    drop: int = 0


# The narrowest a wrapping text column gets before a column is dropped instead.
_TEXT_MIN_WIDTH = 10
OUTPUT_FORMATS = ("table", "wide", "json")
OutputOption = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        help="table (default; fits the terminal), wide (every column, never wrapped) or json.",
        metavar="FORMAT",
    ),
]


# A mutating command's --json: what it changed, as one document (see ``changes``).
ChangesJsonOption = Annotated[
    bool, typer.Option("--json", help="Print what changed as one JSON document on stdout.")
]


def output_format(value: str | None, json_flag: bool = False) -> str:
    """The format a listing prints in: ``-o``'s value (checked), ``json`` for ``--json``."""
    if value is None:
        return "json" if json_flag else "table"
    if value not in OUTPUT_FORMATS:
        raise ConfigError(f"-o/--output: unknown format {value!r} (use table, wide or json)")
    if json_flag and value != "json":
        raise ConfigError(f"give --json or -o {value}, not both")
    return value


def print_listing(
    shape: str,
    document: dict[str, Any],
    columns: Sequence[str | Column],
    rows: Iterable[Sequence[Any]],
    *,
    empty: str,
) -> bool:
    """A list command's answer in ``shape`` (``output_format``'s): ``document`` as JSON, else
    ``rows`` as a table (every column for ``wide``), or the note ``empty`` when there are
    none. True when it printed a table, under which a command may add a note."""
    if shape == "json":
        print_json(document)
        return False
    data = list(rows)
    if not data:
        note(empty)
        return False
    print_table(columns, data, wide=shape == "wide")
    return True


def print_table(
    columns: Sequence[str | Column],
    rows: Iterable[Sequence[Any]],
    *,
    title: str | None = None,
    wide: bool = False,
) -> None:
    """A rich table on stdout; None cells render as a dim dash.

    On a terminal the table fits its width without cutting an id or a number: text cells
    wrap, and when that is not enough whole columns are dropped (and a note on stderr says
    which; ``wide`` shows them all, as wide as they need). Piped output is never narrowed.
    """
    data = [list(row) for row in rows]
    specs = [_column_spec(column, index, data) for index, column in enumerate(columns)]
    # Piped output is read by grep and awk: plain space-separated columns, never a cell
    # wrapped to a guessed terminal width. Cells are literal text, never rich markup.
    piped = not stdout.is_terminal
    if piped or wide:
        width = _PIPE_WIDTH if piped else max(stdout.width, _natural_width(specs, data))
        console = TerminalConsole(soft_wrap=True, width=width, no_color=stdout.no_color)
        table = _build_table(specs, data, range(len(specs)), title, piped=piped, wide=True)
        if not piped:
            console.print(table)
            return
        with console.capture() as captured:
            console.print(table)
        sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
        sys.stdout.flush()
        return
    shown = _fitting_columns(specs, data, stdout.width)
    stdout.print(_build_table(specs, data, shown, title, piped=False, wide=False))
    hidden = [specs[i].name for i in range(len(specs)) if i not in shown]
    if hidden:
        note(f"not shown at this width: {', '.join(hidden)} (-o wide shows every column)")


def _column_spec(column: str | Column, index: int, data: list[list[Any]]) -> Column:
    """A Column for a plain name, its kind inferred from the cells."""
    if isinstance(column, Column):
        return column
    cells = [row[index] for row in data if row[index] is not None]
    if cells and all(isinstance(c, UUID) for c in cells):
        return Column(column, "id")
    if cells and all(isinstance(c, int | float) and not isinstance(c, bool) for c in cells):
        return Column(column, "number")
    return Column(column)


def _cell_width(value: Any) -> int:
    return max((len(line) for line in _cell(value).plain.splitlines()), default=0)


def _min_width(spec: Column, index: int, data: list[list[Any]]) -> int:
    """The narrowest a column may be: ids and numbers whole, text down to a few characters."""
    longest = max((_cell_width(row[index]) for row in data), default=0)
    if spec.kind == "text":
        return max(min(longest, _TEXT_MIN_WIDTH), min(len(spec.name), _TEXT_MIN_WIDTH), 1)
    return max(longest, len(spec.name), 1)


def _natural_width(specs: list[Column], data: list[list[Any]]) -> int:
    """How wide the table is with every cell on one line."""
    widths = [
        max([len(spec.name)] + [_cell_width(row[i]) for row in data])
        for i, spec in enumerate(specs)
    ]
    return sum(widths) + 3 * max(len(widths) - 1, 0)


def _is_blank(value: Any) -> bool:
    return value is None or value == 0 or (isinstance(value, str | Text) and not str(value))


def _fitting_columns(specs: list[Column], data: list[list[Any]], width: int) -> list[int]:
    """The columns that fit ``width`` at their narrowest, dropping the all-blank ones (an
    all-zero count, a setting nobody set) and then the highest ``drop`` first (later columns
    first among equals)."""
    shown = list(range(len(specs)))
    droppable = [i for i in reversed(shown) if data and all(_is_blank(row[i]) for row in data)]
    ranked = sorted(
        (i for i in shown if specs[i].drop > 0 and i not in droppable),
        key=lambda i: (-specs[i].drop, -i),
    )
    order = droppable + ranked

    def needed(columns: list[int]) -> int:
        # Each column is padded by one space either side; a rule separates neighbours.
        return sum(_min_width(specs[i], i, data) + 2 for i in columns) + len(columns) - 1

    for index in order:
        if needed(shown) <= width:
            break
        shown.remove(index)
    return shown


def _build_table(
    specs: list[Column],
    data: list[list[Any]],
    shown: Iterable[int],
    title: str | None,
    *,
    piped: bool,
    wide: bool,
) -> Table:
    columns = list(shown)
    table = Table(
        title=None if title is None else safe_text(title),
        header_style="bold",
        show_edge=False,
        pad_edge=False,
        box=None if piped else box.HEAVY_HEAD,
    )
    for index in columns:
        spec = specs[index]
        whole = spec.kind != "text" or wide
        table.add_column(
            safe_text(spec.name),
            no_wrap=whole,
            overflow="fold",
            min_width=_min_width(spec, index, data) if spec.kind != "text" else None,
            justify="right" if spec.kind == "number" else "left",
        )
    for row in data:
        table.add_row(*(_cell(row[i]) for i in columns))
    return table


def _cell(value: Any) -> Text:
    """A table cell: literal text (never markup, controls escaped), a dim dash for None,
    styled Text with its styles."""
    if value is None:
        return _DASH
    return safe_text(value if isinstance(value, Text) else str(value))


def styled(value: str, style: str) -> Text:
    """A cell or word with a colour; rich drops it when colours are off."""
    return Text(value, style=style)


def info(message: str) -> None:
    """A human message on stdout (literal text: brackets in names are not rich markup)."""
    stdout.print(terminal_safe(message), highlight=False, markup=False)


def warn(message: str) -> None:
    """A one-line warning on stderr."""
    stderr.print(f"warning: {terminal_safe(message)}", highlight=False, markup=False)


def error(message: str) -> None:
    """A one-line error on stderr (newlines folded so scripts see exactly one line)."""
    line = " ".join(terminal_safe(message).split())
    sys.stderr.write(f"error: {line}\n")
    sys.stderr.flush()


# --- shared renderings of TaskQ rows ------------------------------------------------------------
# JSON documents use these stable snake_case names; times are ISO-8601 (via to_jsonable) and
# durations are seconds in fields whose names say so.


def now() -> datetime:
    """The local clock, for ages in human output (JSON carries absolute times instead)."""
    return datetime.now(UTC)


def age(then: datetime | None, reference: datetime | None = None) -> str | None:
    """How long ago ``then`` was, compactly: ``45s``, ``3m10s``, ``2h5m``, ``4d2h``."""
    if then is None:
        return None
    delta = (reference or now()) - then
    future = delta < timedelta(0)
    seconds = int(abs(delta.total_seconds()))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count or (unit == "s" and not parts):
            parts.append(f"{count}{unit}")
    text = "".join(parts[:2])
    return f"in {text}" if future else text


def ago(then: datetime | None, reference: datetime | None = None) -> str | None:
    """``age`` followed by "ago", for a table's cell (None stays None)."""
    text = age(then, reference)
    return None if text is None else f"{text} ago"


def timestamp(value: datetime | None) -> str | None:
    """A time for humans: ISO-8601 to the second."""
    return None if value is None else value.isoformat(timespec="seconds")


def seconds(value: timedelta | None) -> float | None:
    """A duration as seconds for JSON (None stays None)."""
    return None if value is None else value.total_seconds()


STATUS_STYLES = {
    "waiting": "dim cyan",
    "pending": "cyan",
    "scheduled": "blue",
    "running": "yellow",
    "claimed": "dim yellow",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
    "crashed": "red",
    "abandoned": "red",
}


def status_cell(status: str) -> Text:
    """A job status, coloured by what it means."""
    return styled(status, STATUS_STYLES.get(status, ""))


# One vocabulary for a job's life, in every view (CLI, taskq top, web UI): a job whose
# status is running but whose body has not started is "claimed" (a worker prefetched it and
# it waits for a free consumer); "running" means its body runs. Counts show the running
# bodies, then the claimed ones as "+N claimed"; attempts show the retry budget spent, a
# claim that has not started its body spending none (JobSummary.attempts_spent).


def running_count(running: int, claimed: int, number: Callable[[int], str] = str) -> str:
    """Running bodies, plus the jobs claimed ahead of a free consumer: ``2 +1 claimed``."""
    return f"{number(running)} +{number(claimed)} claimed" if claimed else number(running)


def worker_load(running: int, claimed: int, concurrency: int) -> str:
    """``running/concurrency``, plus the jobs claimed ahead of a free consumer."""
    load = f"{running}/{concurrency}"
    return f"{load} +{claimed} claimed" if claimed else load


def shown_status(job: JobSummary) -> str:
    """The status a listing shows: ``claimed`` for a running job whose body has not started
    (claimed ahead of a free consumer), else the job's status."""
    return "claimed" if job.is_claimed else job.status.value


def status_line(job: JobSummary) -> str:
    """The status a job's page shows, a claimed job's in words."""
    if job.is_claimed:
        return "claimed: waiting for a free consumer, its body has not started (status running)"
    return job.status.value


def attempt_cell(job: JobSummary) -> str:
    """``spent/budget``: the attempt in progress of a running job, the attempts used so far
    of a waiting or claimed one."""
    return f"{job.attempts_spent}/{job.attempt_budget}"


def attempt_summary(job: JobSummary) -> str:
    """The attempt in words: the last claim's number, and the retry budget spent of its
    size (numbers count every claim; only some use the budget: docs/reliability.md)."""
    used = f"{job.attempts_spent} of {job.attempt_budget} used ({job.retry_kind})"
    if job.attempt == 0:
        return used
    if job.is_claimed:
        return f"#{job.attempt} claimed, its body not started; {used}"
    return f"#{job.attempt}, {used}"


def job_rows(jobs: Iterable[JobSummary], reference: datetime | None = None) -> list[list[Any]]:
    """Table rows with the fields an operator needs first (see JOB_COLUMNS)."""
    return [
        [
            job.id,
            job.actor,
            job.queue,
            status_cell(shown_status(job)),
            attempt_cell(job),
            age(job.created_at, reference),
            error_text(job.error_class, job.error_message),
        ]
        for job in jobs
    ]


def error_text(error_class: str | None, message: str | None) -> str | None:
    """``Class: message`` on one line (the class alone when there is no message)."""
    if error_class is None:
        return None
    line = " ".join((message or "").split())
    return f"{error_class}: {line}" if line else error_class


# On a narrow terminal age goes first, then the attempt, then the error; id, actor, queue
# and status always show.
JOB_COLUMNS = (
    Column("id", "id"),
    Column("actor"),
    Column("queue"),
    Column("status"),
    Column("attempt", "number", drop=2),
    Column("age", "number", drop=3),
    Column("error", drop=1),
)


def print_fields(pairs: Iterable[tuple[str, Any]]) -> None:
    """``name  value`` lines, aligned, for one record (None shows as a dash)."""
    items = list(pairs)
    width = max((len(name) for name, _ in items), default=0)
    for name, value in items:
        info(f"{name.ljust(width)}  {'-' if value is None else value}")


def changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What a mutating command changed, for its ``--json``: ``{field: {"from", "to"}}`` for
    every field of ``after`` whose value differs from ``before`` (JSON-compared)."""
    old, new = to_jsonable(before), to_jsonable(after)
    return {
        name: {"from": old.get(name), "to": value}
        for name, value in new.items()
        if old.get(name) != value
    }


def compact_json(value: Any) -> str:
    """A value as one line of JSON, for a table cell or a field."""
    return json.dumps(to_jsonable(value), ensure_ascii=False, sort_keys=True)


def note(message: str) -> None:
    """A remark for humans on stderr (``no jobs match``), keeping stdout clean for pipes."""
    stderr.print(terminal_safe(message), highlight=False, markup=False)
