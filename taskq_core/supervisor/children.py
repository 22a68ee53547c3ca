"""Child processes: what the manager asks of a child, and the real one it runs.

``ChildProcess`` is the seam: the manager only spawns through a ``ChildFactory``, polls and
signals, so its tests pass fakes. ``PopenChild`` is the real thing: ``subprocess.Popen`` in a
session of its own, signalled as a process group, tied to the supervisor's life.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from taskq_core.supervisor.parent_death import parent_death_guard


@dataclass(frozen=True, slots=True)
class ChildLaunch:
    """What a child constructor needs: the command, its full environment and its output."""

    label: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    output: Path | None = None  # None: inherit the supervisor's stdout/stderr


class ChildProcess(Protocol):
    """A running child as the manager sees it."""

    @property
    def pid(self) -> int:
        """The child's pid (also its process-group id)."""
        ...

    def poll(self) -> int | None:
        """The exit code once it has exited (negative: killed by that signal), else None."""
        ...

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the child's whole process group; a no-op once it has exited."""
        ...


ChildFactory = Callable[[ChildLaunch], ChildProcess]


class PopenChild:
    """A real child: ``subprocess.Popen`` in a new session (its own process group).

    On Linux the child also asks the kernel for SIGTERM when this supervisor dies
    (``parent_death``), so a SIGKILLed supervisor leaves no worker behind.
    """

    def __init__(self, launch: ChildLaunch) -> None:
        output: IO[bytes] | None = None
        if launch.output is not None:
            output = launch.output.open("ab")
        try:
            self._process = subprocess.Popen(
                list(launch.argv),
                env=dict(launch.env),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT if output is not None else None,
                start_new_session=True,
                preexec_fn=parent_death_guard(),
            )
        finally:
            if output is not None:
                output.close()

    @property
    def pid(self) -> int:
        """The child's pid, which is also its process-group id."""
        return self._process.pid

    def poll(self) -> int | None:
        """Reap the child if it has exited and return its code."""
        return self._process.poll()

    def signal(self, signum: int) -> None:
        """Signal the process group while the leader is unreaped (its id cannot be reused)."""
        if self._process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signum)
