"""The characters a queue or schedule name may hold, checked where one is made.

A name is 1 to 200 characters: ASCII letters and digits, ``_``, ``.``, ``:`` and ``-``,
starting with a letter, a digit or ``_``. Such a name is one URL path segment as it is, a
shell word, a Redis key part and a log field with nothing to escape; ``/``, ``..``,
spaces, control characters and markup cannot be in one.

Checked when a name is made: an enqueue (the queue a job goes to: a queue exists once a
job names it), ``--create`` on ``taskq queues``, ``taskq jobs move --to``, a schedule made
by ``create_schedule``, ``taskq schedules add`` or ``@cron``, and a schedule's queue. Names
stored before the check keep working: their jobs are claimed and listed, and the CLI and
the admin UI address them (the UI encodes every path segment, taskq_cli/ui/paths.py). A
batch is named by its id, a UUID, and needs no check.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from taskq_core.errors import ConfigError

MAX_NAME_LENGTH: Final = 200
NAME_RULE: Final = (
    f"1-{MAX_NAME_LENGTH} ASCII letters, digits, '_', '.', ':' or '-', "
    "starting with a letter, digit or '_'"
)
_NAME = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.:\-]{{0,{MAX_NAME_LENGTH - 1}}}")

NameKind = Literal["queue", "schedule"]


class InvalidNameError(ConfigError):
    """A queue or schedule name outside the character set (NAME_RULE)."""


def is_valid_name(name: object) -> bool:
    """Whether ``name`` is a string within the character set."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def check_name(name: object, kind: NameKind, *, field: str | None = None) -> str:
    """``name`` if it is a valid queue or schedule name, else InvalidNameError naming
    ``field`` (default: ``queue name``/``schedule name``) and the rule."""
    if is_valid_name(name):
        assert isinstance(name, str)
        return name
    label = field or f"{kind} name"
    shown = repr(name) if isinstance(name, str) and len(name) <= 80 else "the name given"
    raise InvalidNameError(f"{label}: {shown} is not a valid {kind} name; use {NAME_RULE}")
