"""``taskq workflows list|show|cancel|retry``: workflows, their steps, and the two verbs.

A workflow is a set of jobs (its steps) with dependencies, enqueued at once; a step with
dependencies waits (status ``waiting``) until they allow it. ``show`` lists every step with
what it waits for. ``cancel`` cancels every step not yet ended (running ones cooperatively);
``retry`` runs the failed, crashed and cancelled steps again, and their dependents after
them. An id is taken whole or as a unique prefix or suffix of one of the newest workflows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from uuid import UUID

import typer

from taskq_cli import inputs, output
from taskq_cli.database import with_backend
from taskq_cli.job_ids import check_id_ref, id_among_newest
from taskq_cli.operator import operator_id
from taskq_cli.options import DsnOption, JsonOption, SchemaOption
from taskq_cli.workflow_progress import (
    DUE_STATUSES,
    FAILED_STATUSES,
    WORKFLOW_STATUSES,
    WorkflowNotFoundError,
    by_status,
    count_of,
    ended,
    parse_workflow_status,
    step_document,
    steps_text,
    waiting_for,
    workflow_document,
)
from taskq_core.backend.protocol import Backend
from taskq_core.backend.protocol.admin import Audit
from taskq_core.backend.protocol.workflows import (
    WorkflowCancel,
    WorkflowFilter,
    WorkflowRow,
    WorkflowStatus,
    WorkflowStep,
)
from taskq_core.errors import InvalidTransitionError
from taskq_core.statemachine import JobStatus

# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
app = typer.Typer(
    help="Workflows (jobs that wait for other jobs): list them, show one's steps, cancel or "
    "retry one.",
    no_args_is_help=True,
)

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
# A piece of an id is matched against this many newest workflows (there is no id search).
ID_SCAN = 200

WorkflowIdArgument = Annotated[
    str,
    typer.Argument(
        help="Workflow id: the UUID, or a unique prefix or suffix of one of the newest "
        f"{ID_SCAN} workflows.",
        metavar="ID",
    ),
]


def check_workflow_ref(text: str) -> str:
    """``text`` when it can name a workflow (a UUID, or hex digits of one), checked before
    any database is reached."""
    return check_id_ref(text, "workflow", WorkflowNotFoundError)


async def resolve_workflow(backend: Backend, text: str) -> WorkflowRow:
    """The workflow ``text`` names (a whole id, or a piece of one of the newest
    ``ID_SCAN``), with its steps' counts."""

    async def newest() -> list[UUID]:
        return [row.id for row in await backend.list_workflows(WorkflowFilter(limit=ID_SCAN))]

    nouns = ("workflow", "workflows")
    ident = await id_among_newest(text, newest, ID_SCAN, nouns, WorkflowNotFoundError)
    row = await backend.get_workflow(ident)
    if row is None:
        raise WorkflowNotFoundError(f"no workflow with id {ident}")
    return row


_STATUS_STYLES = {
    "running": "yellow",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
}


def _status_cell(status: WorkflowStatus) -> Any:
    return output.styled(status.value, _STATUS_STYLES.get(status.value, ""))


# The options and the "newest N" note mirror ``batches list`` on purpose: typer reads each
# command's own signature, and the two listings differ in every column after them.
@app.command("list")
def list_workflows(
    ctx: typer.Context,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            help=f"Only workflows in this status: {', '.join(WORKFLOW_STATUSES)}.",
            autocompletion=lambda: list(WORKFLOW_STATUSES),
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", help=f"At most N workflows, newest first (max {MAX_LIMIT}).")
    ] = DEFAULT_LIMIT,
    json: JsonOption = False,
    output_option: output.OutputOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Workflows, newest first: status, steps ended of total, and the steps by status.

    "due" counts steps released to dispatch (pending or scheduled), "waiting" the steps
    whose dependencies have not allowed them yet, "failed" those that failed, crashed or
    were abandoned.
    """
    shape = output.output_format(output_option, json)
    workflow_filter = WorkflowFilter(
        status=parse_workflow_status(status),
        limit=inputs.check_int(limit, "--limit", minimum=1, maximum=MAX_LIMIT),
    )

    async def run(backend: Backend) -> list[WorkflowRow]:
        return await backend.list_workflows(workflow_filter)

    rows = with_backend(ctx, dsn, schema, run, read=True)
    reference = output.now()
    listed = output.print_listing(
        shape,
        {"workflows": [workflow_document(row) for row in rows], "count": len(rows)},
        [
            output.Column("id", "id"),
            output.Column("name"),
            output.Column("status"),
            output.Column("ended", "number"),
            output.Column("waiting", "number", drop=5),
            output.Column("due", "number", drop=6),
            output.Column("running", "number", drop=4),
            output.Column("failed", "number", drop=3),
            output.Column("cancelled", "number", drop=7),
            output.Column("created", "number", drop=2),
            output.Column("finished", "number", drop=8),
        ],
        [
            (
                row.id,
                row.name,
                _status_cell(row.status),
                f"{ended(row)}/{row.total}",
                row.counts.get(JobStatus.WAITING, 0),
                count_of(row.counts, DUE_STATUSES),
                row.counts.get(JobStatus.RUNNING, 0),
                count_of(row.counts, FAILED_STATUSES),
                row.counts.get(JobStatus.CANCELLED, 0),
                output.ago(row.created_at, reference),
                output.ago(row.finished_at, reference),
            )
            for row in rows
        ],
        empty="no workflows match",
    )
    if listed and len(rows) == workflow_filter.limit:
        output.note(f"showing the newest {len(rows)}; a larger --limit shows more")


@dataclass(frozen=True)
class _Shown:
    row: WorkflowRow
    steps: list[WorkflowStep]


async def _show(backend: Backend, text: str) -> _Shown:
    row = await resolve_workflow(backend, text)
    return _Shown(row, await backend.list_workflow_steps(row.id))


@app.command("show")
def show(
    ctx: typer.Context,
    workflow_id: WorkflowIdArgument,
    json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """One workflow and every step: status, what it waits for, its terms, its attempt.

    "after" names the steps a step depends on; "waits for" those of a waiting step that have
    not ended. A step that requires "succeeded" runs once every dependency succeeded (and
    is cancelled when one fails for good); "finished", once every one ended.
    """
    ref = check_workflow_ref(workflow_id)
    shown = with_backend(ctx, dsn, schema, lambda backend: _show(backend, ref), read=True)
    by_name = {step.name: step for step in shown.steps}
    if json:
        output.print_json(
            {
                **workflow_document(shown.row),
                "steps": [step_document(step, by_name) for step in shown.steps],
            }
        )
        return
    output.print_fields(_fields(shown.row))
    output.info("")
    output.print_table(
        [
            output.Column("step"),
            output.Column("actor"),
            output.Column("status"),
            output.Column("after"),
            output.Column("waits for"),
            output.Column("requires", drop=3),
            output.Column("attempt", "number", drop=2),
            output.Column("error / reason", drop=1),
            output.Column("job", "id", drop=4),
        ],
        [
            (
                step.name,
                step.actor,
                output.status_cell(step.status.value),
                ", ".join(step.after) or None,
                ", ".join(waiting_for(step, by_name)) or None,
                step.requires,
                step.attempt,
                output.error_text(step.error_class, step.error_message) or step.cancel_reason,
                step.job_id,
            )
            for step in shown.steps
        ],
        title="steps",
    )


def _fields(row: WorkflowRow) -> list[tuple[str, Any]]:
    when = output.timestamp
    finished = None
    if row.finished_at is not None:
        finished = f"{when(row.finished_at)} ({output.ago(row.finished_at)})"
    return [
        ("id", row.id),
        ("name", row.name),
        ("status", row.status.value),
        ("progress", steps_text(row)),
        ("by status", ", ".join(f"{n} {status}" for status, n in by_status(row).items())),
        ("created", f"{when(row.created_at)} ({output.ago(row.created_at)})"),
        ("finished", finished),
        ("cancel asked", when(row.cancel_requested_at)),
        ("metadata", output.compact_json(row.metadata) if row.metadata else None),
    ]


CancelReasonOption = Annotated[
    str | None,
    typer.Option("--reason", help="Why (stored on every step it cancels, with who)."),
]


def _cancel_reason(said: str | None) -> str:
    """The reason every cancelled step carries: who cancelled the workflow, and why."""
    head = f"workflow cancelled by {operator_id()}"
    return f"{head}: {said}" if said else head


@app.command("cancel")
def cancel(
    ctx: typer.Context,
    workflow_id: WorkflowIdArgument,
    reason: CancelReasonOption = None,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Cancel every step not yet ended: waiting and due ones at once, running ones
    cooperatively; the workflow ends cancelled once its last step ended."""
    ref = check_workflow_ref(workflow_id)
    said = inputs.optional_text(reason, "--reason")
    why = _cancel_reason(said)

    async def run(backend: Backend) -> tuple[WorkflowRow, WorkflowCancel | None, WorkflowRow]:
        before = await resolve_workflow(backend, ref)
        if before.is_finished:
            return before, None, before
        done = await backend.cancel_workflow(before.id, why, audit=Audit(operator_id(), said))
        after = await backend.get_workflow(before.id)
        return before, done, before if after is None else after

    before, done, after = with_backend(ctx, dsn, schema, run)
    if done is None:
        if before.status is WorkflowStatus.CANCELLED:
            _cancelled_already(before, json)
            return
        raise InvalidTransitionError(
            f"workflow {before.id} is {before.status.value}: there is nothing to cancel"
        )
    if json:
        output.print_json(
            {
                "workflow_id": after.id,
                "cancelled": done.cancelled,
                "stopping": done.stopping,
                "changed": output.changes({"status": before.status}, {"status": after.status}),
                "status": after.status,
                "cancel_reason": why,
            }
        )
        return
    if before.cancel_requested_at is not None and not (done.cancelled or done.stopping):
        output.info(
            f"workflow {after.id}: a cancel was asked before; it ends cancelled once its "
            "running steps stopped"
        )
        return
    output.info(
        f"workflow {after.id}: cancelled {done.cancelled} step(s) at once; asked "
        f"{done.stopping} running step(s) to stop; it is {after.status.value}"
    )


def _cancelled_already(row: WorkflowRow, json: bool) -> None:
    if json:
        output.print_json(
            {
                "workflow_id": row.id,
                "cancelled": 0,
                "stopping": 0,
                "changed": {},
                "status": row.status,
                "cancel_reason": None,
            }
        )
        return
    output.info(f"workflow {row.id} was already cancelled")


@app.command("retry")
def retry(
    ctx: typer.Context,
    workflow_id: WorkflowIdArgument,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Retry the failed, crashed and cancelled steps with a fresh attempt budget: each runs
    again once its dependencies allow it, and the steps after it then."""
    ref = check_workflow_ref(workflow_id)

    async def run(backend: Backend) -> tuple[WorkflowRow, int, WorkflowRow]:
        before = await resolve_workflow(backend, ref)
        retried = await backend.retry_workflow(before.id, audit=Audit(operator_id()))
        after = await backend.get_workflow(before.id)
        return before, retried, before if after is None else after

    before, retried, after = with_backend(ctx, dsn, schema, run)
    if not retried:
        raise InvalidTransitionError(
            f"workflow {before.id} is {before.status.value} and has no failed, crashed or "
            "cancelled step: there is nothing to retry"
        )
    if json:
        output.print_json(
            {
                "workflow_id": after.id,
                "retried": retried,
                "changed": output.changes({"status": before.status}, {"status": after.status}),
                "status": after.status,
            }
        )
        return
    output.info(f"workflow {after.id}: retried {retried} step(s); it is {after.status.value}")
