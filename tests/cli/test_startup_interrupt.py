"""Ctrl-C while ``taskq`` is still starting ends it quietly with 130, like a Ctrl-C during a
command: no import traceback on the operator's terminal.

The child holds the import of a chosen module (typer, loaded by every run, or the command
module asked for) until the test interrupts it, so the SIGINT lands inside start-up every
time; the test waits for the child to say it got there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

# The console script's body, behind an import hook that parks on one module's import.
_CHILD = """
import sys, threading

HELD = sys.argv.pop(1)

class Gate:
    def find_spec(self, name, path=None, target=None):
        if name == HELD:
            print("importing", name, flush=True)
            threading.Event().wait()  # until SIGINT
        return None

sys.meta_path.insert(0, Gate())
from taskq_cli.app import main
main()
"""


@pytest.mark.parametrize(
    ("held", "args"),
    [
        ("typer", ["--help"]),
        ("typer", ["jobs", "list"]),
        ("taskq_cli.commands.jobs", ["jobs", "list"]),
    ],
)
def test_ctrl_c_during_start_up_exits_130_without_a_traceback(held: str, args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, held, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    assert child.stdout.readline() == f"importing {held}\n"
    child.send_signal(signal.SIGINT)
    stdout, stderr = child.communicate(timeout=60)
    assert child.returncode == 130
    assert stdout == ""
    assert stderr == ""
