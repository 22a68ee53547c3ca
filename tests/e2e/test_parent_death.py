"""PopenChild's parent-death guard, with real processes and real signals (Linux).

A stand-in supervisor spawns a child through ``PopenChild``; the child records the signal it
gets in a marker file. SIGKILLing the stand-in must SIGTERM the child (the kernel's
``PR_SET_PDEATHSIG``), and a child whose supervisor is already gone when it starts must
SIGTERM itself. Waits poll with a deadline; nothing sleeps to synchronize.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from taskq_core.supervisor import parent_death

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(parent_death._PRCTL is None, reason="needs prctl (Linux)"),
]
ROOT = Path(__file__).resolve().parents[2]

# The child: say it started, record SIGTERM in the marker, then exit 0 (a graceful exit).
CHILD = textwrap.dedent(
    """
    import pathlib, signal, sys, time
    marker = pathlib.Path(sys.argv[1])
    def on_term(signum, frame):
        marker.write_text("SIGTERM")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    marker.write_text("started")
    time.sleep(120)
    """
)
# The stand-in supervisor: spawn CHILD through PopenChild, print its pid, wait to be killed.
SUPERVISOR = textwrap.dedent(
    """
    import sys, time
    from taskq_core.supervisor.children import ChildLaunch, PopenChild
    argv = (sys.executable, "-c", sys.argv[1], sys.argv[2])
    child = PopenChild(ChildLaunch(label="c-1", argv=argv, env={}))
    print(child.pid, flush=True)
    time.sleep(120)
    """
)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def poll_for(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def test_a_sigkilled_supervisor_gets_its_child_a_sigterm(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, CHILD, str(marker)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert supervisor.stdout is not None
    child = int(supervisor.stdout.readline())
    try:
        poll_for(lambda: marker.exists(), timeout=15, what="the child started")
        supervisor.kill()
        supervisor.wait(10)
        poll_for(lambda: gone(child), timeout=15, what="the orphaned child gone")
        assert marker.read_text() == "SIGTERM"  # told to stop gracefully, not killed
    finally:
        supervisor.kill()
        supervisor.wait(10)
        supervisor.stdout.close()
        if not gone(child):
            psutil.Process(child).kill()


def test_a_child_whose_supervisor_died_before_the_prctl_terminates_itself(
    tmp_path: Path,
) -> None:
    assert parent_death._PRCTL is not None
    not_our_parent = psutil.Process().ppid()  # the child's parent is us, not this pid
    guard = parent_death.ParentDeathGuard(parent_death._PRCTL, not_our_parent)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "marker")],
        preexec_fn=guard,
        start_new_session=True,
    )
    assert child.wait(15) == -signal.SIGTERM
    assert not (tmp_path / "marker").exists()  # it never got to run


def test_a_child_of_a_live_supervisor_runs_normally() -> None:
    guard = parent_death.parent_death_guard()
    assert guard is not None
    child = subprocess.Popen([sys.executable, "-c", "pass"], preexec_fn=guard)
    assert child.wait(15) == 0
