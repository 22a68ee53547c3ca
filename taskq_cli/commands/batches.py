"""``taskq batches list|show``: batches with a row, their progress, policy and finalizer.

A ``batches`` row exists only for a batch enqueued with a failure policy or a finalizer;
plain tagged batches (children carrying ``metadata.batch_id`` and nothing more) have none
and are not listed, though ``show`` of such an id still counts its children. Progress is
counted from the jobs table (``taskq_cli.batch_progress``). ``show`` names the few latest
failed children, found among the newest failed jobs (there is no per-batch job read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from uuid import UUID

import typer

from taskq_cli import inputs, output
from taskq_cli.batch_progress import FAILED_STATUSES, UNTRACKED, BatchProgress, read_progress
from taskq_cli.database import with_backend
from taskq_cli.job_documents import row_fields
from taskq_cli.job_ids import check_id_ref, id_among_newest
from taskq_cli.options import DsnOption, JsonOption, SchemaOption
from taskq_core.backend.protocol import Backend, JobSummary
from taskq_core.backend.protocol.batches import BatchFilter
from taskq_core.errors import TaskqError

# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
app = typer.Typer(
    help="Batches with a failure policy or a finalizer: list them, show one's progress.",
    no_args_is_help=True,
)

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
# A piece of an id is matched against this many newest batches (there is no id search).
ID_SCAN = 200
# ``show``: how many of the latest failed children it names.
SHOWN_FAILURES = 5

BatchIdArgument = Annotated[
    str,
    typer.Argument(
        help="Batch id: the UUID, or a unique prefix or suffix of one of the newest "
        f"{ID_SCAN} batches.",
        metavar="ID",
    ),
]


class BatchNotFoundError(TaskqError):
    """No batch has that id (nor any job carrying it)."""


def check_batch_ref(text: str) -> str:
    """``text`` when it can name a batch (a UUID, or hex digits of one), checked before any
    database is reached."""
    return check_id_ref(text, "batch", BatchNotFoundError)


async def resolve_batch_id(backend: Backend, text: str) -> UUID:
    """The batch ``text`` names: a whole id as given, else the one batch among the newest
    ``ID_SCAN`` whose id starts or ends with it."""

    async def newest() -> list[UUID]:
        return [row.id for row, _ in await backend.list_batches(BatchFilter(limit=ID_SCAN))]

    return await id_among_newest(text, newest, ID_SCAN, ("batch", "batches"), BatchNotFoundError)


def _finalizer_cell(progress: BatchProgress) -> str | None:
    row = progress.row
    return None if row is None else row.finalizer_actor


@app.command("list")
def list_batches(
    ctx: typer.Context,
    active: Annotated[
        bool | None,
        typer.Option("--active/--ended", help="Only active batches (or only ended ones)."),
    ] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="Only this queue's batches.")] = None,
    limit: Annotated[
        int, typer.Option("--limit", help=f"At most N batches, newest first (max {MAX_LIMIT}).")
    ] = DEFAULT_LIMIT,
    json: JsonOption = False,
    output_option: output.OutputOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Batches, newest first: status, children done of total, failures, finalizer.

    Only batches enqueued with a failure policy or a finalizer have a row and are listed;
    a plain tagged batch (children with metadata.batch_id only) is not. "failed" counts
    children that failed, crashed or were abandoned; "failures" is the consecutive
    failures of the abort threshold.
    """
    shape = output.output_format(output_option, json)
    batch_filter = BatchFilter(
        queue=inputs.optional_name(queue, "--queue"),
        active=active,
        limit=inputs.check_int(limit, "--limit", minimum=1, maximum=MAX_LIMIT),
    )

    async def run(backend: Backend) -> list[BatchProgress]:
        listed = await backend.list_batches(batch_filter)
        return [BatchProgress(row.id, row, counts) for row, counts in listed]

    batches = with_backend(ctx, dsn, schema, run, read=True)
    reference = output.now()
    listed = output.print_listing(
        shape,
        {"batches": [b.document() for b in batches], "count": len(batches)},
        [
            output.Column("id", "id"),
            output.Column("queue"),
            output.Column("status"),
            output.Column("done", "number"),
            output.Column("failed", "number", drop=4),
            output.Column("cancelled", "number", drop=5),
            output.Column("failures", "number", drop=6),
            output.Column("finalizer", drop=3),
            output.Column("finalizer job", "id", drop=8),
            output.Column("created", "number", drop=2),
            output.Column("ended", "number", drop=7),
        ],
        [
            (
                b.batch_id,
                None if b.row is None else b.row.queue,
                _status_cell(b.status),
                f"{b.done}/{b.total}",
                b.failed,
                b.cancelled,
                b.failures_text(),
                _finalizer_cell(b),
                None if b.row is None else b.row.finalizer_job_id,
                output.ago(b.row.created_at if b.row else None, reference),
                output.ago(b.row.completed_at if b.row else None, reference),
            )
            for b in batches
        ],
        empty="no batches match (only batches with a failure policy or a finalizer are listed)",
    )
    if listed and len(batches) == batch_filter.limit:
        output.note(f"showing the newest {len(batches)}; a larger --limit shows more")


_STATUS_STYLES = {"active": "yellow", "complete": "green", "aborted": "red", UNTRACKED: "dim"}


def _status_cell(status: str) -> Any:
    return output.styled(status, _STATUS_STYLES.get(status, ""))


@dataclass(frozen=True)
class _Shown:
    progress: BatchProgress
    failures: list[JobSummary]


async def _recent_failures(backend: Backend, progress: BatchProgress) -> list[JobSummary]:
    """The latest failed children (one walk of the batch's own index entries)."""
    if not progress.failed:
        return []
    return await backend.list_batch_jobs(progress.batch_id, FAILED_STATUSES, SHOWN_FAILURES)


async def _show(backend: Backend, text: str) -> _Shown:
    batch_id = await resolve_batch_id(backend, text)
    progress = await read_progress(backend, batch_id)
    if progress.row is None and progress.counts.total == 0:
        raise BatchNotFoundError(f"no batch with id {batch_id}")
    return _Shown(progress, await _recent_failures(backend, progress))


def _failure_document(job: JobSummary) -> dict[str, Any]:
    return row_fields(job, "id status finished_at error_class error_message")


@app.command("show")
def show(
    ctx: typer.Context,
    batch_id: BatchIdArgument,
    json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """One batch: its row, its children by status, its finalizer, its latest failures.

    A whole id of a plain tagged batch (no row) shows its children's counts.
    """
    ref = check_batch_ref(batch_id)
    shown = with_backend(ctx, dsn, schema, lambda backend: _show(backend, ref), read=True)
    progress = shown.progress
    if json:
        output.print_json(
            {
                **progress.document(),
                "recent_failures": [_failure_document(job) for job in shown.failures],
            }
        )
        return
    output.print_fields(_fields(progress))
    output.info("")
    by_status = sorted(progress.counts.by_status.items())
    if by_status:
        output.print_table(
            [output.Column("status"), output.Column("children", "number")],
            [(output.status_cell(status.value), count) for status, count in by_status],
            title="children in the jobs table",
        )
    else:
        output.info("children in the jobs table: none")
    if not shown.failures:
        return
    output.info("")
    output.print_table(
        [output.Column("id", "id"), output.Column("status"), output.Column("error")],
        [
            (
                job.id,
                output.status_cell(job.status.value),
                output.error_text(job.error_class, job.error_message),
            )
            for job in shown.failures
        ],
        title="latest failed children",
    )


def _fields(progress: BatchProgress) -> list[tuple[str, Any]]:
    row = progress.row
    if row is None:
        return [
            ("id", progress.batch_id),
            ("status", f"{UNTRACKED}: no batch row (a plain tagged batch, or its row was pruned)"),
            ("children", f"{progress.done} of {progress.total} done in the jobs table"),
        ]
    when = output.timestamp
    failures = "no failure policy"
    if row.failure_threshold is not None:
        failures = (
            f"{row.consecutive_failures} in a row; aborts at {row.failure_threshold} "
            "(a success resets the count)"
        )
    finalizer = "none"
    if row.finalizer_actor is not None:
        finalizer = row.finalizer_actor + (
            f" (job {row.finalizer_job_id})"
            if row.finalizer_job_id is not None
            else " (enqueued when the batch ends)"
        )
    children = progress.children_text()
    if progress.archived:
        children += f"; {progress.archived} archived"
    ended = None
    if row.completed_at is not None:
        ended = f"{when(row.completed_at)} ({output.age(row.completed_at)} ago)"
    return [
        ("id", row.id),
        ("queue", row.queue),
        ("status", row.status.value),
        ("children", children),
        ("failures", failures),
        ("finalizer", finalizer),
        ("created", f"{when(row.created_at)} ({output.age(row.created_at)} ago)"),
        ("ended", ended),
        ("metadata", output.compact_json(row.metadata) if row.metadata else None),
    ]
