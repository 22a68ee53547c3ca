"""Rendering: rich tables for humans, one JSON document for scripts, one-line errors on stderr.

Colours follow rich's detection: off when stdout is not a terminal or ``NO_COLOR`` is set.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from enum import Enum
from typing import Any
from uuid import UUID

from rich.console import Console
from rich.table import Table

stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


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


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None
) -> None:
    """A rich table on stdout; None cells render as a dim dash."""
    table = Table(title=title, header_style="bold", show_edge=False, pad_edge=False)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    stdout.print(table)


def info(message: str) -> None:
    """A human message on stdout."""
    stdout.print(message, highlight=False)


def warn(message: str) -> None:
    """A one-line warning on stderr."""
    stderr.print(f"warning: {message}", highlight=False, markup=False)


def error(message: str) -> None:
    """A one-line error on stderr (newlines folded so scripts see exactly one line)."""
    line = " ".join(message.split())
    sys.stderr.write(f"error: {line}\n")
    sys.stderr.flush()
