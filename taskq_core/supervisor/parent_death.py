"""Children die with their supervisor: ``PR_SET_PDEATHSIG`` set between fork and exec (Linux).

A child started in its own session keeps running when its supervisor is SIGKILLed: nothing
tells it. On Linux the kernel can: ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` in the child makes the
kernel send SIGTERM when the parent dies, and the worker shuts down gracefully as on any other
SIGTERM. The setting survives ``execve`` (not of set-user-ID binaries) and belongs to the
parent *thread* that forked, so the manager spawns children from its event-loop thread only.

If the supervisor died between the fork and the ``prctl``, no signal will ever come: the child
then checks that its parent is still the supervisor (whose pid was read before the fork) and
SIGTERMs itself otherwise. Where ``prctl`` is unavailable nothing is done here; the worker's
``ParentWatch`` (``taskq_core.worker.parent``) is the portable fallback.

The guard runs as ``preexec_fn``, in the child between fork and exec, where a multi-threaded
parent's locks may be held by threads that no longer exist. So it is kept tiny: everything is
resolved in the parent beforehand (libc's ``prctl`` through ctypes, the pids, the signal), and
the child only makes system calls; it imports nothing, logs nothing and takes no lock.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

Prctl = Callable[[int, int, int, int, int], int]


def _load_prctl() -> Prctl | None:
    """libc's ``prctl`` on Linux, resolved once in the parent (the child must not dlopen)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl  # type: ignore[no-any-return]


_PRCTL = _load_prctl()


class ParentDeathGuard:
    """A ``preexec_fn``: ask for ``signum`` when the parent dies; die now if it already has."""

    def __init__(self, prctl: Prctl, supervisor_pid: int, signum: int = signal.SIGTERM) -> None:
        self._prctl = prctl
        self._supervisor_pid = supervisor_pid
        self._signum = signum

    def __call__(self) -> None:
        """Runs in the child between fork and exec."""
        self._prctl(PR_SET_PDEATHSIG, self._signum, 0, 0, 0)
        if os.getppid() != self._supervisor_pid:
            # Orphaned before the prctl: nobody will signal us. The handlers inherited from
            # the supervisor would swallow the signal, so restore the default action first.
            signal.signal(self._signum, signal.SIG_DFL)
            os.kill(os.getpid(), self._signum)
            os._exit(128 + self._signum)  # only reached if the signal is blocked


def parent_death_guard(signum: int = signal.SIGTERM) -> ParentDeathGuard | None:
    """A guard for a child about to be forked by this process, or None without ``prctl``."""
    if _PRCTL is None:
        return None
    return ParentDeathGuard(_PRCTL, os.getpid(), signum)
