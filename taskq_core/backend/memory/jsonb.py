"""Values as the memory backend stores and hands them out: JSON with jsonb's semantics, and
frozen row snapshots that share nothing mutable with the stored records."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

from taskq_core import jsontext

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_RowT = TypeVar("_RowT", bound="DataclassInstance")
_JSON_COLUMNS = frozenset({"payload", "result", "metadata", "progress_state", "detail"})


def as_json(value: Any) -> Any:
    """A deep copy with jsonb semantics: tuples become lists; NaN, NUL and non-JSON values
    raise UnstorableValueError, as PostgreSQL refuses them."""
    return json.loads(jsontext.encode(value))


def json_text(text: str | None) -> Any:
    """The value of JSON text a worker encoded (a result), as ``text::jsonb`` would read it:
    text that is not JSON, or holds NaN, Infinity or a NUL, raises UnstorableValueError."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise jsontext.UnstorableValueError(f"not storable as JSON: {exc}") from None
    return as_json(value)  # json.loads reads NaN, Infinity and \u0000; jsonb does not


def freeze(record: object, row_type: type[_RowT], **extra: Any) -> _RowT:
    """The frozen ``row_type`` for a mutable record, sharing nothing mutable with it."""
    values = {f.name: getattr(record, f.name) for f in fields(row_type) if f.name not in extra}
    for name in _JSON_COLUMNS.intersection(values):
        values[name] = as_json(values[name])
    return row_type(**values, **extra)
