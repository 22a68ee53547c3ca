"""Generate ``completions/taskq.{bash,zsh,fish}`` from the typer app (``make completions``).

Each script is what ``taskq --show-completion SHELL`` prints. Like kubectl's and gh's, the
scripts call back into ``taskq`` when the user presses TAB, so they offer every command,
option and value list (statuses, queue modes) of the installed CLI, and the queue and actor
names of the database the command would reach (taskq_cli/completion.py). ``--check`` regenerates
them in memory and exits 1 when a committed script has drifted; tests/cli/test_completions.py
runs the same comparison.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

SHELLS = ("bash", "zsh", "fish")
ROOT = Path(__file__).resolve().parents[1]
COMPLETIONS = ROOT / "completions"


def render(shell: str) -> str:
    """The completion script for ``shell``, from the CLI itself in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKQ_", "_TASKQ_"))}
    # Without this, typer inspects the parent process to guess the shell.
    env["_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "taskq_cli", "--show-completion", shell],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    if result.returncode != 0 or not result.stdout.strip():
        raise SystemExit(f"taskq --show-completion {shell} failed: {result.stderr.strip()}")
    return result.stdout


def path_for(shell: str) -> Path:
    """Where the committed script for ``shell`` lives."""
    return COMPLETIONS / f"taskq.{shell}"


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check``, compare) every shell's script; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a script drifted")
    args = parser.parse_args(argv)
    drifted = []
    for shell in SHELLS:
        script = render(shell)
        target = path_for(shell)
        if args.check:
            if not target.exists() or target.read_text() != script:
                drifted.append(str(target.relative_to(ROOT)))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(script)
        print(f"wrote {target.relative_to(ROOT)}")
    if drifted:
        print(f"out of date: {', '.join(drifted)} (run `make completions`)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
