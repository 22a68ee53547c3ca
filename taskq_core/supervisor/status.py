"""What the workgroup manager reports: events pushed to a sink, statuses pulled by displays.

Event names are stable snake_case verb phrases (``child_started``, ``spec_given_up``); the
default sink writes each as one structlog line. ``ChildStatus`` is the read-only view of one
child that ``taskq workgroup start``'s live table renders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from taskq_core.obs.logs import get_logger


@dataclass(frozen=True, slots=True)
class SupervisorEvent:
    """One lifecycle event: a stable snake_case name, a log level and its fields."""

    name: str
    level: str
    fields: Mapping[str, Any]


EventSink = Callable[[SupervisorEvent], None]


def log_event(event: SupervisorEvent) -> None:
    """The default sink: one structlog line per event (component ``workgroup``)."""
    logger = get_logger("workgroup")
    getattr(logger, event.level)(event.name, **event.fields)


class ChildState(StrEnum):
    """Where one child slot is in its lifecycle (see ``supervisor.manager``)."""

    PENDING = "pending"
    RUNNING = "running"
    BACKOFF = "backoff"
    STOPPING = "stopping"
    FINISHED = "finished"
    GIVEN_UP = "given_up"


@dataclass(frozen=True, slots=True)
class ChildStatus:
    """A read-only view of one child for displays."""

    label: str
    spec: str
    state: ChildState
    pid: int | None
    uptime: float | None
    restarts: int
    last_seen_at: datetime | None
    # Seconds since the supervisor saw last_seen_at move, on its monotonic clock (this host's
    # and the database's wall clocks may disagree); None until the child registered.
    last_seen_ago: float | None
    last_exit_code: int | None
    restart_in: float | None
