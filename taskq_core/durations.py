"""Duration parsing in one place: ``30s``, ``5m``, ``2h``, ``7d``, ``1h30m``, ISO-8601, seconds."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_COMPACT_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_ISO_RE = re.compile(
    r"^P(?:(?P<weeks>\d+(?:\.\d+)?)W)?(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration(value: str | float | int | timedelta) -> timedelta:
    """Parse a human or ISO-8601 duration; raise ValueError with the accepted forms."""
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        result = timedelta(seconds=float(value))
    elif isinstance(value, str):
        result = _parse_text(value.strip())
    else:
        raise ValueError(f"invalid duration {value!r}")
    if result < timedelta(0):
        raise ValueError(f"invalid duration {value!r}: must not be negative")
    return result


def _parse_text(text: str) -> timedelta:
    if not text:
        raise ValueError("invalid duration '': expected e.g. 30s, 5m, 2h, 7d or PT30S")
    try:
        return timedelta(seconds=float(text))
    except ValueError:
        pass
    iso = _ISO_RE.match(text.upper())
    if iso and text.upper() not in ("P", "PT") and not text.upper().endswith("T"):
        parts = {k: float(v) for k, v in iso.groupdict().items() if v is not None}
        return timedelta(**parts)
    lowered = text.lower()
    pos = 0
    total = 0.0
    for match in _COMPACT_RE.finditer(lowered):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos == len(lowered) and pos > 0:
        return timedelta(seconds=total)
    raise ValueError(f"invalid duration {text!r}: expected e.g. 30s, 5m, 2h, 7d or PT30S")


def format_duration(delta: timedelta) -> str:
    """Render a timedelta compactly (``1h30m``, ``45s``, ``250ms``) for humans."""
    total = delta.total_seconds()
    if total < 1:
        return f"{round(total * 1000)}ms"
    seconds = round(total)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"
