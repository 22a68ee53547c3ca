"""A workgroup reload (SIGHUP or ``workgroup reload``): what may change, and what did.

The manager applies a fresh plan child by child; a changed ``runtime_dir`` is refused (the
control socket and status files live there) and takes a restart of the whole group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from taskq_core.errors import ConfigError
from taskq_core.supervisor.plan import WorkgroupPlan


@dataclass(frozen=True, slots=True)
class ReloadOutcome:
    """What a reload changed, by child label."""

    started: tuple[str, ...]
    restarted: tuple[str, ...]
    stopped: tuple[str, ...]
    unchanged: tuple[str, ...]

    def event_fields(self) -> dict[str, Any]:
        """The ``workgroup_reloaded`` event's fields for this outcome."""
        return {
            "started": self.started,
            "restarted": self.restarted,
            "stopped": self.stopped,
            "unchanged": self.unchanged,
        }


def check_reloadable(current: WorkgroupPlan, fresh: WorkgroupPlan) -> None:
    """Raise ConfigError when ``fresh`` cannot replace ``current`` without a group restart."""
    if fresh.runtime_dir != current.runtime_dir:
        raise ConfigError(
            f"runtime_dir changed ({current.runtime_dir} -> {fresh.runtime_dir}); "
            "that takes a restart of the workgroup"
        )
