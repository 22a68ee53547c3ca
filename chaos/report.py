"""The scenario table and the failed invariants, with rich."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from chaos.harness import ScenarioResult


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _outcomes(result: ScenarioResult) -> str:
    return " ".join(f"{status} {n}" for status, n in sorted(result.outcomes.items())) or "-"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def verdict(result: ScenarioResult) -> str:
    if result.skipped:
        return "SKIP"
    return "PASS" if result.passed else "FAIL"


def table(results: list[ScenarioResult], *, title: str) -> Table:
    out = Table(title=title)
    out.add_column("scenario")
    out.add_column("jobs", justify="right")
    out.add_column("outcomes")
    out.add_column("done twice", justify="right")
    out.add_column("crashed w/o body", justify="right")
    out.add_column("recover first / drain", justify="right")
    out.add_column("time", justify="right")
    out.add_column("result")
    for r in results:
        style = {"PASS": "green", "FAIL": "bold red", "SKIP": "yellow"}[verdict(r)]
        out.add_row(
            r.name,
            str(r.jobs),
            _outcomes(r),
            _count(r.completed_twice),
            _count(r.crashed_without_body),
            f"{_seconds(r.recover_first)} / {_seconds(r.recover_drain)}",
            f"{r.elapsed:.0f}s",
            f"[{style}]{verdict(r)}[/]",
        )
    return out


def details(console: Console, results: list[ScenarioResult]) -> None:
    """Every failed check with its evidence, then each scenario's notes."""
    for r in results:
        if r.skipped:
            console.print(f"[yellow]{r.name}[/]: {r.skipped}")
            continue
        for check in r.failures():
            kind = " (timed)" if check.timed else ""
            console.print(f"[bold red]{r.name}[/]: FAILED{kind} {check.name}: {check.detail}")
        if r.failed_by_cause:
            causes = "; ".join(r.failed_by_cause)
            console.print(f"{r.name}: jobs not succeeded, by cause: {causes}")
        if r.notes:
            console.print(f"[dim]{r.name}: " + "; ".join(r.notes) + "[/]")


def markdown_table(results: list[ScenarioResult]) -> str:
    """The same table as Markdown, for docs/reliability.md."""
    head = (
        "| scenario | jobs | outcomes | done twice | crashed w/o body "
        "| recover first / drain | time | result |\n|---|---:|---|---:|---:|---:|---:|---|\n"
    )
    rows = [
        f"| {r.name} | {r.jobs} | {_outcomes(r)} | {_count(r.completed_twice)} "
        f"| {_count(r.crashed_without_body)} "
        f"| {_seconds(r.recover_first)} / {_seconds(r.recover_drain)} | {r.elapsed:.0f}s "
        f"| {verdict(r)} |"
        for r in results
    ]
    return head + "\n".join(rows) + "\n"
