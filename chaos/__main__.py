"""``python -m chaos [--short] [--scenario NAME]... [--list] [--logs DIR] [--markdown FILE]``.

Runs the scenarios (all of them by default) on a private PostgreSQL, prints one table row per
scenario and every failed invariant, and exits 1 when any invariant failed (0 otherwise; a
skipped scenario is not a failure).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import structlog
from rich.console import Console

from chaos import report
from chaos.harness import ScenarioResult
from chaos.runner import keep_or_remove, run_all
from chaos.scenarios import SCENARIOS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--short", action="store_true", help="the scaled-down CI version")
    parser.add_argument(
        "--scenario", action="append", choices=sorted(SCENARIOS), help="run only these (repeat)"
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--logs", type=Path, help="keep worker logs and markers here")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.list:
        for scenario in SCENARIOS.values():
            console.print(f"{scenario.name:18} {scenario.summary}")
        return 0
    names = args.scenario or list(SCENARIOS)
    directory = args.logs or Path(tempfile.mkdtemp(prefix="chaos-run-"))
    directory.mkdir(parents=True, exist_ok=True)
    mode = "short" if args.short else "full"
    started = datetime.now(UTC)
    console.print(f"chaos ({mode}): {', '.join(names)}; logs in {directory}")

    def progress(result: ScenarioResult) -> None:
        console.print(f"  {result.name}: {report.verdict(result)} ({result.elapsed:.0f}s)")

    results = asyncio.run(run_all(names, short=args.short, directory=directory, on_result=progress))
    title = f"TaskQ chaos ({mode}), {started:%Y-%m-%d %H:%M} UTC"
    console.print(report.table(results, title=title))
    report.details(console, results)
    if args.markdown:
        args.markdown.write_text(f"{title}\n\n{report.markdown_table(results)}")
    if keep_or_remove(directory, results, keep=args.logs is not None):
        console.print(f"logs kept in {directory}")
    return 1 if any(not r.passed and not r.skipped for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
