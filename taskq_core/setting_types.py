"""The duration types of settings: a ``TASKQ_*`` duration reads ``30s``, ``5m``, ``1h30m``,
ISO-8601 or plain seconds (durations.py), as seconds or as a ``timedelta``."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator

from taskq_core.durations import parse_duration


def _seconds(value: Any) -> float:
    if isinstance(value, str | int | float | timedelta) and not isinstance(value, bool):
        return parse_duration(value).total_seconds()
    raise ValueError(f"invalid duration {value!r}")


def _duration(value: Any) -> timedelta:
    if value is None:
        raise ValueError("a duration is required")
    return parse_duration(value)


def _optional_seconds(value: Any) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return _seconds(value)


Seconds = Annotated[float, BeforeValidator(_seconds)]
OptionalSeconds = Annotated[float | None, BeforeValidator(_optional_seconds)]
Duration = Annotated[timedelta, BeforeValidator(_duration)]
