"""Named SQL queries loaded once from the ``sql/*.sql`` files next to this module.

A file holds blocks introduced by ``-- name: <query_name>``. The only interpolation is
``{schema}``, and ``render`` re-validates the identifier before every substitution.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from taskq_core.constants import validate_identifier

_NAME_RE = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@cache
def _load_all() -> dict[str, str]:
    queries: dict[str, str] = {}
    folder = resources.files("taskq_core.backend.postgres") / "sql"
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text(encoding="utf-8")
        pieces = _NAME_RE.split(text)
        for name, body in zip(pieces[1::2], pieces[2::2], strict=True):
            if name in queries:
                raise RuntimeError(f"duplicate SQL query name {name!r} in {entry.name}")
            queries[name] = body.strip().rstrip(";")
    return queries


def render(name: str, schema: str) -> str:
    """The query ``name`` with ``{schema}`` replaced by the validated schema identifier."""
    return _load_all()[name].replace("{schema}", validate_identifier(schema))


class SchemaQueries:
    """All named queries rendered for one schema, cached at construction."""

    def __init__(self, schema: str) -> None:
        self.schema = validate_identifier(schema)
        self._rendered = {name: render(name, schema) for name in _load_all()}

    def __getitem__(self, name: str) -> str:
        return self._rendered[name]
