"""The ``taskq`` console script: start-up, then the root command (``taskq_cli.root``).

This module imports nothing heavy, so that a Ctrl-C while the CLI is still loading (typer,
then the one command asked for) ends the process quietly with 130, like a Ctrl-C during a
command, instead of printing an import traceback.
"""

from __future__ import annotations

import sys

from taskq_cli.exit_codes import EXIT_INTERRUPTED


def run(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` and return the exit code (the testable core of ``main``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        from taskq_cli.root import invoke

        return invoke(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def main() -> None:
    """Console-script entry point."""
    sys.exit(run())
