"""User input, parsed and validated in one place: durations, JSON payloads, ids, names, numbers.

Every parser raises ConfigError with one line that names the flag and, for JSON, where the
text is invalid. Text bound for PostgreSQL is checked here too (no NUL characters, valid
UTF-8), so bad input fails before any write instead of inside one.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from taskq_core import names
from taskq_core.backend.protocol import QueueMode
from taskq_core.durations import parse_duration
from taskq_core.errors import ConfigError
from taskq_core.statemachine import JobStatus, parse_status

# PostgreSQL integer columns (priority, max_concurrent, max_pending) are 32-bit.
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
# Far enough for any real schedule or TTL, near enough that now() + it is a valid timestamp.
MAX_DURATION = timedelta(days=36500)
QUEUE_MODES: tuple[QueueMode, ...] = ("strict_fifo", "round_robin")
_MAX_NAME_LENGTH = 200
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_REGISTRY_SPEC_RE = re.compile(rf"{_DOTTED}:{_DOTTED}")
_MAX_JSON_DEPTH = 100


def check_text(value: str, flag: str) -> str:
    """Text PostgreSQL can store: no NUL characters, encodable as UTF-8."""
    if "\x00" in value:
        raise ConfigError(f"{flag}: must not contain a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{flag}: {value!r} is not valid UTF-8") from None
    return value


def check_name(value: str, flag: str) -> str:
    """An actor or queue name: non-blank, printable, at most 200 characters."""
    check_text(value, flag)
    if not value.strip():
        raise ConfigError(f"{flag}: must not be empty")
    if len(value) > _MAX_NAME_LENGTH:
        raise ConfigError(f"{flag}: at most {_MAX_NAME_LENGTH} characters")
    if not value.isprintable():
        raise ConfigError(f"{flag}: {value!r} contains control characters")
    return value


def new_name(value: str, kind: names.NameKind, flag: str) -> str:
    """A queue or schedule name about to be made: within taskq_core.names' character set.
    Names stored before that rule are addressed as they are (``check_name``)."""
    check_name(value, flag)  # the plainer faults first: empty, too long, control characters
    return names.check_name(value, kind, field=flag)


def optional_new_name(value: str | None, kind: names.NameKind, flag: str) -> str | None:
    """``new_name`` for an optional flag."""
    return None if value is None else new_name(value, kind, flag)


def optional_name(value: str | None, flag: str) -> str | None:
    """``check_name`` for an optional flag."""
    return None if value is None else check_name(value, flag)


def optional_text(value: str | None, flag: str) -> str | None:
    """``check_text`` for an optional flag."""
    return None if value is None else check_text(value, flag)


def check_registry_spec(value: str, flag: str = "--actors") -> str:
    """``MODULE:ATTR`` with dotted Python names on both sides, checked before any import."""
    if not _REGISTRY_SPEC_RE.fullmatch(value):
        raise ConfigError(
            f"{flag} {value!r}: expected MODULE:ATTRIBUTE with Python names, "
            "e.g. myapp.actors:registry"
        )
    return value


def parse_duration_option(value: str, flag: str) -> timedelta:
    """A duration (``30s``, ``5m``, ``2h``, ``7d``, ``1h30m``, ISO-8601 ``PT30S``, seconds)."""
    try:
        result = parse_duration(value)
    except (ValueError, OverflowError) as exc:
        message = str(exc) if isinstance(exc, ValueError) else f"invalid duration {value!r}"
        raise ConfigError(f"{flag}: {message}") from None
    if result > MAX_DURATION:
        raise ConfigError(f"{flag}: {value!r} is longer than {MAX_DURATION.days} days")
    return result


def parse_age(value: str, flag: str, now: datetime) -> timedelta:
    """How long ago: a positive duration (``7d``, ``PT12H``) or an ISO-8601 timestamp in the
    past (``2024-05-01``, ``2024-05-01T12:00:00+02:00``; UTC when it names no offset), which
    becomes its distance from ``now``. Zero, negative and future values are refused."""
    text = value.strip()
    if text.startswith("-"):
        raise ConfigError(
            f"{flag}: {value!r} is negative; give how long ago (e.g. 7d) or a past timestamp"
        )
    try:
        age = parse_duration(text)
    except (ValueError, OverflowError):
        return _age_of_timestamp(value, flag, now)
    if age <= timedelta(0):
        raise ConfigError(f"{flag}: must be longer than zero, got {value!r}")
    if age > MAX_DURATION:
        raise ConfigError(f"{flag}: {value!r} is longer than {MAX_DURATION.days} days")
    return age


def parse_moment(value: str, flag: str) -> datetime:
    """An ISO-8601 moment (``2026-12-24T09:00+01:00``; UTC when it names no offset)."""
    return _iso_moment(value, flag, "an ISO-8601 time (2026-12-24T09:00+01:00)")


def _iso_moment(value: str, flag: str, wanted: str) -> datetime:
    """``value`` as an ISO-8601 date or date-time, UTC when it names no offset; a ConfigError
    naming ``flag`` and what was ``wanted`` otherwise."""
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ConfigError(f"{flag}: cannot read {value!r}: give {wanted}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def parse_time_bound(value: str, flag: str) -> datetime | timedelta:
    """A point in time for a filter: how long ago (``2h``, ``7d``, ``PT30M``; read on the
    database clock) or an ISO-8601 moment (``2024-05-01``, ``2024-05-01T12:00+02:00``; UTC
    when it names no offset)."""
    text = value.strip()
    if text.startswith("-"):
        raise ConfigError(f"{flag}: {value!r} is negative; give how long ago (e.g. 2h) or a time")
    try:
        ago = parse_duration(text)
    except (ValueError, OverflowError):
        wanted = "how long ago (30s, 5m, 2h, 7d, PT30S) or an ISO-8601 time"
        return _iso_moment(value, flag, wanted)
    if ago > MAX_DURATION:
        raise ConfigError(f"{flag}: {value!r} is longer than {MAX_DURATION.days} days")
    return ago


def parse_names(values: Sequence[str] | None, flag: str) -> tuple[str, ...] | None:
    """A repeatable name filter (``--queue a --queue b``): None when not given, else every
    name once, in the order given. Commas are not separators: a name may hold one."""
    if not values:
        return None
    names: list[str] = []
    for value in values:
        check_text(value, flag)
        if value not in names:
            names.append(value)
    return tuple(names)


def _age_of_timestamp(value: str, flag: str, now: datetime) -> timedelta:
    """How long before ``now`` an ISO-8601 date or date-time (UTC when naive) was."""
    wanted = "a duration (30s, 5m, 2h, 7d, PT30S) or an ISO-8601 timestamp"
    moment = _iso_moment(value, flag, wanted)
    if moment >= now:
        raise ConfigError(f"{flag}: {value!r} is in the future")
    return now - moment


def parse_statuses(
    values: Sequence[str] | None, flag: str = "--status", *, allowed: frozenset[JobStatus]
) -> list[JobStatus] | None:
    """Statuses named by a repeatable flag (``a,b`` also works), each one of ``allowed``."""
    if not values:
        return None
    statuses: list[JobStatus] = []
    for value in values:
        for part in value.split(","):
            try:
                status = parse_status(part.strip())
            except ValueError as exc:
                raise ConfigError(f"{flag}: {exc}") from None
            if status not in allowed:
                names = ", ".join(s.value for s in JobStatus if s in allowed)
                raise ConfigError(f"{flag}: {status.value!r} is not allowed here (use {names})")
            if status not in statuses:
                statuses.append(status)
    return statuses


def parse_mode(value: str) -> QueueMode:
    """A queue mode: strict_fifo or round_robin."""
    for mode in QUEUE_MODES:
        if value == mode:
            return mode
    raise ConfigError(f"invalid queue mode {value!r} (valid: {', '.join(QUEUE_MODES)})")


def check_int(value: int, flag: str, *, minimum: int, maximum: int = INT32_MAX) -> int:
    """An integer inside the range its column (or common sense) allows."""
    if not minimum <= value <= maximum:
        raise ConfigError(f"{flag}: {value} is out of range ({minimum}..{maximum})")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"number {text} is too large")
    return number


def _read_payload_source(value: str) -> tuple[str, str]:
    """The JSON text and where it came from: inline, ``@FILE`` or ``-`` (stdin)."""
    if value == "-":
        try:
            return sys.stdin.read(), "stdin"
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--payload -: cannot read stdin ({exc})") from None
    if value.startswith("@") and len(value) > 1:
        path = value[1:]
        try:
            return Path(path).read_text(encoding="utf-8"), path
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(f"--payload: cannot read {path!r} ({reason})") from None
    return value, "--payload"


def parse_payload(value: str | None) -> dict[str, Any]:
    """A JSON object given inline, as ``@FILE`` or as ``-`` (stdin); says where it is invalid."""
    if value is None:
        return {}
    text, source = _read_payload_source(value)
    try:
        document = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"invalid JSON payload ({source}) at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigError(f"invalid JSON payload ({source}): {reason}") from None
    if not isinstance(document, dict):
        kind = "array" if isinstance(document, list) else type(document).__name__
        kind = {"str": "string", "int": "number", "float": "number", "NoneType": "null"}.get(
            kind, kind
        )
        raise ConfigError(f"invalid JSON payload ({source}): expected an object, got {kind}")
    _check_json_text(document, "$", 0)
    return document


def _check_json_text(value: Any, where: str, depth: int) -> None:
    """Strings PostgreSQL's jsonb cannot hold (NUL, lone surrogates) fail with their path."""
    if depth > _MAX_JSON_DEPTH:
        raise ConfigError(f"invalid JSON payload: nested deeper than {_MAX_JSON_DEPTH} at {where}")
    if isinstance(value, str):
        try:
            check_text(value, where)
        except ConfigError as exc:
            raise ConfigError(f"invalid JSON payload: {exc}") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}[{json.dumps(key)}]"  # ASCII-escaped, safe to print
            _check_json_text(key, f"{path} (the key)", depth + 1)
            _check_json_text(item, path, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json_text(item, f"{where}[{index}]", depth + 1)
