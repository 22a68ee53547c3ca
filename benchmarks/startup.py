"""Start-up benchmark: how long ``taskq`` takes before it does anything (``make bench``).

Runs the installed console script (the one beside this interpreter) ``--runs`` times per
case and prints the median and the slowest wall time of each: ``--help``, ``--version``, and
TAB completions through the same environment variables the shell scripts in completions/
set. Every TAB press pays the start-up, so the target for help and command-name completion
is a quarter of a second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TASKQ = Path(sys.executable).parent / "taskq"
TARGET_SECONDS = 0.25


@dataclass(frozen=True)
class Case:
    """One command line to time, with the environment it needs."""

    label: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


def _completion(words: str) -> tuple[tuple[str, str], ...]:
    """What completions/taskq.bash sets when TAB is pressed after ``taskq WORDS``."""
    return (
        ("_TASKQ_COMPLETE", "complete_bash"),
        ("COMP_WORDS", f"taskq {words}"),
        ("COMP_CWORD", str(len(words.split(" ")))),
    )


CASES = (
    Case("taskq --help", ("--help",)),
    Case("taskq --version", ("--version",)),
    Case("TAB: taskq j<TAB> (command names)", (), _completion("j")),
    Case("TAB: taskq jobs list --status <TAB>", (), _completion("jobs list --status ")),
)


def _time_once(case: Case, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        [str(TASKQ), *case.args],
        env={**env, **dict(case.env)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs per case (default 15)")
    args = parser.parse_args(argv)
    # Completion reads no database here, and no .env of the caller's directory.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKQ_", "_TASKQ_"))}
    print(f"start-up of {TASKQ} (median and slowest of {args.runs} runs; target for help and")
    print(f"command-name completion: {TARGET_SECONDS:.2f} s)")
    for case in CASES:
        _time_once(case, env)  # warm the bytecode cache and the page cache
        times = [_time_once(case, env) for _ in range(args.runs)]
        print(f"  {case.label:<40} {statistics.median(times):6.3f} s   max {max(times):6.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
