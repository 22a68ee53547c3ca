"""``taskq prune``: run the leader's prune now and print what it moved to the archive (or
would move).

The policy is the leader's (``taskq_core.retention.prune_policy``: per-status retention,
archive period and batch size from the settings), narrowed by ``--status``, ``--queue`` and
``--older-than``. A real prune asks first: on a terminal it says how many jobs would move and
waits for a yes; elsewhere it needs ``--yes``, as bulk ``cancel`` and ``retry`` do. It takes
the cluster lock the leader's prune takes, so it never runs beside another prune; a dry run
only counts and needs no lock. On a terminal a progress bar counts the moved jobs against
the dry-run total, one batch at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from taskq_cli import inputs, output
from taskq_cli.confirm import confirm_or_refuse
from taskq_cli.database import open_backend
from taskq_cli.options import (
    DsnOption,
    JsonOption,
    SchemaOption,
    YesOption,
    load_settings,
    run_async,
    status_option,
)
from taskq_core.backend.protocol import Backend, PrunePolicy, PruneResult
from taskq_core.constants import PRUNE_LOCK
from taskq_core.durations import format_duration
from taskq_core.errors import ConfigError, TaskqError
from taskq_core.retention import prune_policy
from taskq_core.statemachine import TERMINAL_STATUSES, JobStatus


class PruneLockHeldError(TaskqError):
    """Another prune (the leader's prune or a second ``taskq prune``) holds the lock."""


@dataclass(frozen=True)
class _Run:
    policy: PrunePolicy
    result: PruneResult
    dry_run: bool


# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
def prune(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would move; move nothing.")
    ] = False,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            help="Move terminal jobs finished longer ago than this duration (7d, PT12H) or "
            "before this ISO-8601 time (UTC when it has no offset), instead of each status's "
            "retention setting.",
            metavar="D",
        ),
    ] = None,
    status: Annotated[
        list[str] | None,
        status_option(
            "Only this terminal status (repeat, or a,b); default: every terminal status.",
            TERMINAL_STATUSES,
        ),
    ] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="Only this queue.")] = None,
    yes: YesOption = False,
    json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Move old terminal jobs to the archive now (as the leader's prune does), or count them
    with --dry-run."""
    statuses = inputs.parse_statuses(status, allowed=TERMINAL_STATUSES)
    age = None if older_than is None else inputs.parse_age(older_than, "--older-than", output.now())
    settings = load_settings(ctx, dsn, schema)
    try:
        policy = prune_policy(
            settings,
            statuses=statuses,
            older_than=age,
            queue=inputs.optional_name(queue, "--queue"),
        )
    except ValueError as exc:
        raise ConfigError(f"prune policy: {exc}") from None
    progress = not dry_run and not json and output.stdout.is_terminal

    async def run() -> PruneResult:
        # Direct: the prune lock is a session advisory lock (see open_backend).
        async with open_backend(settings, direct=True) as backend:
            if dry_run:
                return await backend.prune_jobs(policy, dry_run=True)
            due = None
            if not yes:
                due = await backend.prune_jobs(policy, dry_run=True)
                if not due.total:
                    return due  # nothing to move, nothing to ask
                jobs = f"{due.total} job{'' if due.total == 1 else 's'}"
                confirm_or_refuse(
                    f"Move {jobs} to the archive ({_describe_policy(policy)})? Their events "
                    "are deleted",
                    f"prune would move {jobs} to the archive ({_describe_policy(policy)})",
                    yes=False,
                )
            return await _prune_locked(backend, policy, progress, due)

    result = run_async(run())
    done = _Run(policy, result, dry_run)
    if json:
        output.print_json(_document(done))
        return
    _render(done)


async def _prune_locked(
    backend: Backend, policy: PrunePolicy, progress: bool, counted: PruneResult | None
) -> PruneResult:
    """The prune under the cluster lock; refused while another prune holds it. ``counted``:
    the dry run the operator was asked about, the progress bar's total (else counted here)."""
    async with backend.sweep_lock(PRUNE_LOCK) as got:
        if not got:
            raise PruneLockHeldError(
                f"another prune is running (it holds the lock {PRUNE_LOCK!r}): nothing was "
                "moved; run it again once that one is done"
            )
        due = None
        if progress:
            due = counted or await backend.prune_jobs(policy, dry_run=True)
        if due is None or not due.total:
            return await backend.prune_jobs(policy)
        with _progress_bar(due.total) as advance:
            return await backend.prune_jobs(policy, on_batch=advance)


@contextmanager
def _progress_bar(total: int) -> Iterator[Callable[[int], None]]:
    """A bar on stdout counting moved jobs against ``total``; yields the per-batch callback."""
    bar = Progress(
        TextColumn("archiving"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs"),
        TimeElapsedColumn(),
        console=output.stdout,
        transient=True,
    )
    task = bar.add_task("archiving", total=total)

    def advance(moved: int) -> None:
        bar.advance(task, moved)

    with bar:
        yield advance


def _counts(result: PruneResult) -> list[tuple[JobStatus, str, int]]:
    """(status, queue, count) rows in status order, then by queue."""
    order = {status: index for index, status in enumerate(JobStatus)}
    rows = [(status, queue, count) for (status, queue), count in result.moved.items() if count]
    return sorted(rows, key=lambda row: (order[row[0]], row[1]))


def _document(run: _Run) -> dict[str, Any]:
    policy = run.policy
    return {
        "dry_run": run.dry_run,
        "counts": [
            {"status": status, "queue": queue, "count": count}
            for status, queue, count in _counts(run.result)
        ],
        "total": run.result.total,
        "batches": run.result.batches,
        "policy": {
            "retention_seconds": {
                status.value: keep.total_seconds() for status, keep in policy.retention.items()
            },
            "archive_for_seconds": policy.archive_for.total_seconds(),
            "batch_size": policy.batch_size,
            "queue": policy.queue,
        },
    }


def _describe_policy(policy: PrunePolicy) -> str:
    kept = ", ".join(
        f"{status.value} after {format_duration(keep)}" for status, keep in policy.retention.items()
    )
    where = f" of queue {policy.queue!r}" if policy.queue is not None else ""
    return (
        f"terminal jobs{where} finished longer ago than: {kept}; archived for "
        f"{format_duration(policy.archive_for)}"
    )


def _render(run: _Run) -> None:
    result = run.result
    output.info(_describe_policy(run.policy))
    if not result.total:
        verb = "would move" if run.dry_run else "moved"
        output.info(f"nothing to prune: 0 jobs {verb}")
        return
    column = "would move" if run.dry_run else "moved"
    rows: list[tuple[Any, ...]] = [
        (output.status_cell(status.value), queue, count) for status, queue, count in _counts(result)
    ]
    rows.append((output.styled("total", "bold"), None, output.styled(str(result.total), "bold")))
    output.print_table(["status", "queue", column], rows)
    jobs = f"{result.total} job{'' if result.total == 1 else 's'}"
    if run.dry_run:
        output.info(f"dry run: {jobs} would move to the archive; nothing was moved")
    else:
        batches = f"{result.batches} batch{'' if result.batches == 1 else 'es'}"
        output.info(
            f"moved {jobs} to the archive in {batches}; their events were deleted (by design)"
        )
