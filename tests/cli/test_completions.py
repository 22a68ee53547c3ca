"""completions/: the committed scripts match what the CLI generates, and they complete.

The drift check regenerates each script in a subprocess exactly as typer's own tests do
(``--show-completion SHELL`` with shell detection disabled). The scripts call back into
``taskq`` at TAB time, so the bash one is also driven for real to show it offers the
command groups, their subcommands and the value lists of the current CLI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TASKQ_BIN

ROOT = Path(__file__).resolve().parents[2]
SHELLS = ("bash", "zsh", "fish")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKQ_", "_TASKQ_"))}
    env["PATH"] = f"{Path(TASKQ_BIN).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


@pytest.mark.parametrize("shell", SHELLS)
def test_the_committed_script_matches_the_cli(shell: str) -> None:
    generated = subprocess.run(
        [TASKQ_BIN, "--show-completion", shell],
        capture_output=True,
        text=True,
        env=_env(_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1"),
        check=True,
    ).stdout
    committed = (ROOT / "completions" / f"taskq.{shell}").read_text()
    assert committed == generated, f"completions/taskq.{shell} drifted: run `make completions`"


def test_the_generator_check_mode_agrees() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_completions.py"), "--check"],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    assert result.returncode == 0, result.stderr


def _bash_complete(*words: str) -> list[str]:
    """COMPREPLY after sourcing completions/taskq.bash and pressing TAB after ``words``."""
    script = ROOT / "completions" / "taskq.bash"
    quoted = " ".join(f"'{word}'" for word in words)
    program = (
        f"source '{script}'; COMP_WORDS=(taskq {quoted}); COMP_CWORD={len(words)}; "
        '_taskq_completion taskq; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    result = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, env=_env(), check=True
    )
    return result.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_offers_the_operator_commands() -> None:
    top = _bash_complete("")
    for command in ("enqueue", "jobs", "cancel", "retry", "queues", "actor-config", "workers"):
        assert command in top
    assert _bash_complete("jobs", "") == ["list", "show", "explain"]
    assert "set-max-concurrent" in _bash_complete("queues", "")
    assert _bash_complete("queues", "set-mode", "media", "") == ["strict_fifo", "round_robin"]
    assert "failed" in _bash_complete("jobs", "list", "--status", "")
    assert _bash_complete("actor-config", "set", "x", "--clear-max-c") == ["--clear-max-concurrent"]
