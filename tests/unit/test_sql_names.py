"""The named SQL blocks and the code that runs them agree: no name used that no block
defines, no block that nothing runs, no fragment that nothing includes.

Queries are looked up by string (``self._queries["claim_jobs"]``), so a typo or a block left
behind by a refactor shows only when that path runs; this reads both sides statically.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from taskq_core.backend.postgres import queries

ROOT = Path(__file__).resolve().parents[2] / "taskq_core"
POSTGRES = ROOT / "backend" / "postgres"
_FRAGMENT_BLOCK = re.compile(r"^--\s*fragment:\s*(\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{fragment:(\w+)\}")


@cache
def _python_sources() -> tuple[ast.Module, ...]:
    return tuple(ast.parse(path.read_text()) for path in sorted(ROOT.rglob("*.py")))


def _looked_up_names() -> set[str]:
    """Every string literal used as ``<...queries>[...]`` or passed to ``render``."""
    names: set[str] = set()
    for tree in _python_sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                target = node.value
                label = target.attr if isinstance(target, ast.Attribute) else ""
                if isinstance(target, ast.Name):
                    label = target.id
                if isinstance(target, ast.Call):
                    label = getattr(target.func, "id", getattr(target.func, "attr", ""))
                if "queries" in label.lower() and isinstance(node.slice.value, str):
                    names.add(node.slice.value)
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", "")) == "render"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names.add(str(node.args[0].value))
    return names


def _string_constants() -> set[str]:
    return {
        node.value
        for tree in _python_sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_every_query_the_code_looks_up_is_defined() -> None:
    looked_up = _looked_up_names()
    assert len(looked_up) > 50  # the scan found the lookups at all
    assert sorted(looked_up - set(queries._load_all())) == []


def test_every_query_block_is_run_by_some_code() -> None:
    # A name may reach a lookup through a variable (a table of statements), so any string
    # literal naming the block counts as a use.
    unused = set(queries._load_all()) - _string_constants()
    assert sorted(unused) == []


def test_every_fragment_is_included() -> None:
    texts = [path.read_text() for path in sorted((POSTGRES / "sql").glob("*.sql"))]
    defined = {name for text in texts for name in _FRAGMENT_BLOCK.findall(text)}
    included = {name for text in texts for name in _INCLUDE.findall(text)}
    assert defined, "no fragment found: the pattern is stale"
    assert sorted(defined - included) == []
