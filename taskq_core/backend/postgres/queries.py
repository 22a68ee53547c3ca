"""Named SQL queries loaded once from the ``sql/*.sql`` files next to this module.

A file holds blocks introduced by ``-- name: <query_name>``. The only interpolation is
``{schema}``, and ``render`` re-validates the identifier before every substitution.

A block introduced by ``-- fragment: <name>`` is SQL that several queries share (CTEs two
reads must keep alike); a query includes it with ``{fragment:<name>}``, substituted when the
files are loaded.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from taskq_core.constants import validate_identifier

_BLOCK_RE = re.compile(r"^--\s*(name|fragment):\s*(\w+)\s*$", re.MULTILINE)
_INCLUDE_RE = re.compile(r"\{fragment:(\w+)\}")


@cache
def _load_all() -> dict[str, str]:
    queries: dict[str, str] = {}
    fragments: dict[str, str] = {}
    folder = resources.files("taskq_core.backend.postgres") / "sql"
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if not entry.name.endswith(".sql"):
            continue
        text = entry.read_text(encoding="utf-8")
        pieces = _BLOCK_RE.split(text)
        for kind, name, body in zip(pieces[1::3], pieces[2::3], pieces[3::3], strict=True):
            found = queries if kind == "name" else fragments
            if name in found:
                raise RuntimeError(f"duplicate SQL {kind} {name!r} in {entry.name}")
            found[name] = body.strip().rstrip(";")
    return {name: _include(body, fragments) for name, body in queries.items()}


def _include(body: str, fragments: dict[str, str]) -> str:
    def fragment(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in fragments:
            raise RuntimeError(f"unknown SQL fragment {name!r}")
        return fragments[name]

    return _INCLUDE_RE.sub(fragment, body)


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
