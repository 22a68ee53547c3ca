"""How a bad workgroup file is reported: one ``FILE: key.path: reason`` line, never a traceback.

``WorkgroupConfigError`` is that line. ``describe_toml_error`` points a TOML syntax error at its
line (and the key that line assigns); ``describe_validation_error`` turns every pydantic error
into a reason a person can act on (expected type, bound, a "did you mean" for misspelt keys),
all of them on the one line.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from taskq_core.errors import ConfigError


class WorkgroupConfigError(ConfigError):
    """A workgroup file is unreadable or invalid: names the file, the key path and the reason."""

    def __init__(self, file: str | Path, key: str, reason: str) -> None:
        self.file = str(file)
        self.key = key
        self.reason = " ".join(reason.split())
        super().__init__(f"{self.file}: {key}: {self.reason}")


# --- TOML syntax errors ------------------------------------------------------------------


def describe_toml_error(file: str, text: str, exc: tomllib.TOMLDecodeError) -> WorkgroupConfigError:
    """A syntax error, located at the line tomllib points at: ``line N`` (with the key that
    line assigns, when it assigns one). tomllib points where it gave up, which for an
    unclosed string or array is the end of the file: a key guessed from the lines above
    named an unrelated one."""
    message = str(exc)
    match = re.search(r"\(at line (\d+), column (\d+)\)", message)
    lines = text.splitlines()
    line_no = int(match.group(1)) if match else len(lines)  # end of document
    reason = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", message)
    own = lines[line_no - 1] if 0 < line_no <= len(lines) else ""
    assigns = re.match(r'^\s*([A-Za-z0-9_.\-"\']+)\s*=', own)
    where = f"line {line_no}"
    if assigns:
        where += f" ({_locate_line(text, line_no)})"
    return WorkgroupConfigError(file, where, f"invalid TOML: {reason}")


def _locate_line(text: str, line_no: int) -> str:
    """Best-effort key path of the TOML line a syntax error points at.

    A line without its own ``key =`` (a continuation of a multi-line array, say) belongs to
    the nearest assignment above it in the same table.
    """
    counters: dict[str, int] = {}
    table = ""
    last_key: str | None = None
    for line in text.splitlines()[:line_no]:
        stripped = line.strip()
        header = re.match(r"^\[\[\s*([^\]]+?)\s*\]\]", stripped) or re.match(
            r"^\[\s*([^\]]+?)\s*\]", stripped
        )
        if header:
            name = header.group(1)
            if stripped.startswith("[["):
                counters[name] = counters.get(name, 0) + 1
            table, last_key = _table_path(name, counters), None
            continue
        assignment = re.match(r'^\s*([A-Za-z0-9_.\-"\']+)\s*=', line)
        if assignment:
            last_key = assignment.group(1).strip("\"'")
    if last_key is not None:
        return f"{table}.{last_key}" if table else last_key
    return table or "(top level)"


def _table_path(name: str, counters: Mapping[str, int]) -> str:
    parts = [part.strip().strip("\"'") for part in name.split(".")]
    path = ""
    for i in range(len(parts)):
        dotted = ".".join(parts[: i + 1])
        path = f"{path}.{parts[i]}" if path else parts[i]
        if dotted in counters:
            path += f"[{counters[dotted] - 1}]"
    return path


# --- validation errors -------------------------------------------------------------------

_TYPE_REASONS = {
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected an array",
    "dict_type": "expected a table",
    "model_type": "expected a table",
}

_BOUND_REASONS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}

_REQUIRED_HINTS = {
    "actors": ': MODULE:ATTRIBUTE of the actors registry, e.g. actors = "myapp.actors:registry"',
    "workers": ": at least one [[workers]] table",
    "name": ": every [[workers]] table needs a name",
}


def describe_validation_error(
    file: str, raw: Any, exc: ValidationError, *, root: type[BaseModel]
) -> WorkgroupConfigError:
    """Every pydantic error as one file/key/reason line: the first names the key, the others
    follow as ``; key: reason``, so one run shows every problem.

    ``raw`` is the parsed document (key paths keep only parts that exist in it) and ``root``
    the model that validated it (misspelt keys are matched against its tables' fields).
    """
    errors = exc.errors()
    described = [_describe_one(raw, error, root) for error in errors]
    key, reason = described[0]
    for other_key, other_reason in described[1:]:
        reason += f"; {other_key}: {other_reason}"
    return WorkgroupConfigError(file, key, reason)


def _describe_one(raw: Any, error: Any, root: type[BaseModel]) -> tuple[str, str]:
    """One pydantic error as the key path it names and a reason a person can act on."""
    kind = str(error.get("type", ""))
    loc = tuple(error.get("loc", ()))
    key = _key_path(raw, loc, include_missing=kind in ("missing", "extra_forbidden"))
    value = error.get("input")
    if kind == "extra_forbidden":
        reason = "unknown key" + _suggestion(root, loc)
    elif kind == "missing":
        reason = "required" + _REQUIRED_HINTS.get(str(loc[-1]) if loc else "", "")
    elif kind == "too_short" and loc == ("workers",):
        reason = "at least one [[workers]] table is required"
    elif kind in _TYPE_REASONS:
        reason = f"{_TYPE_REASONS[kind]}, got {_toml_type(value)} {_short(value)}".rstrip()
        if loc == ("workers",) and kind == "list_type":
            reason = f"expected an array of tables, got {_toml_type(value)}: write [[workers]]"
    elif kind == "too_short":
        reason = "must not be empty"
    elif kind in _BOUND_REASONS:
        bound = (error.get("ctx") or {}).get(_BOUND_REASONS[kind][1])
        reason = f"must be {_BOUND_REASONS[kind][0]} {bound}, got {_short(value)}"
    else:
        # Our own validators (durations, names, actors) already quote the offending value.
        reason = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    return key or "(top level)", reason


def _key_path(raw: Any, loc: Sequence[Any], *, include_missing: bool) -> str:
    """Render ``loc`` as ``a.b[0].c``, keeping only parts that exist in the file.

    pydantic adds union-member and validator tags to locations; walking the raw document
    drops them. A missing or unknown key is kept as the last part.
    """
    path = ""
    current = raw
    for position, part in enumerate(loc):
        if isinstance(current, dict) and isinstance(part, str) and part in current:
            path = f"{path}.{part}" if path else part
            current = current[part]
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            path += f"[{part}]"
            current = current[part]
        else:
            if include_missing and position == len(loc) - 1 and isinstance(part, str):
                path = f"{path}.{part}" if path else part
            break
    return path


def _suggestion(root: type[BaseModel], loc: Sequence[Any]) -> str:
    """`` (did you mean 'x'?)`` for a misspelt key, from the model that rejected it."""
    model: type[BaseModel] | None = root
    for part in loc[:-1]:
        if model is None or isinstance(part, int):
            continue  # list indexes stay in the same table model
        model = _subtable(model, str(part))
    if model is None or not loc:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _subtable(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    """The table model behind field ``name`` (through ``| None`` and ``list[...]``), if any."""
    found = model.model_fields.get(name)
    return _table_model(found.annotation) if found is not None else None


def _table_model(annotation: Any) -> type[BaseModel] | None:
    if get_origin(annotation) is None and isinstance(annotation, type):
        return annotation if issubclass(annotation, BaseModel) else None
    for argument in get_args(annotation):
        model = _table_model(argument)
        if model is not None:
            return model
    return None


# bool before int: a TOML boolean is a Python int too.
_TOML_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a float"),
    (str, "a string"),
    (list, "an array"),
    (dict, "a table"),
)


def _toml_type(value: Any) -> str:
    found = (name for kind, name in _TOML_TYPES if isinstance(value, kind))
    return next(found, type(value).__name__)


def _short(value: Any) -> str:
    if isinstance(value, dict | list):
        return ""
    text = repr(value)
    return f"{text[:40]}..." if len(text) > 43 else text
