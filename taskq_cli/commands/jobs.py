"""``taskq jobs list|show|explain``: inspect jobs, their attempts and events, and blockers.

``list`` shows the fields an operator needs first (id, actor, queue, status, attempt, age,
error class); ``show`` adds every attempt and the event timeline; ``explain`` says why a
job is not running, checking every blocker in dispatch order (``taskq_core.explain``).
``show`` and ``explain`` also find a job the prune moved to the archive and say so; its
events were deleted when it was archived, by design.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from taskq_cli import inputs, job_cursor, output
from taskq_cli.batch_progress import read_job_batch
from taskq_cli.commands import jobs_repair, reclaims
from taskq_cli.dashboard.snapshot import JobDetail
from taskq_cli.database import note_staleness, open_backend, with_backend
from taskq_cli.explain_verdict import job_state, verdict_label
from taskq_cli.job_documents import job_detail_document, job_summary
from taskq_cli.job_ids import check_job_ref, resolve_job_id
from taskq_cli.job_progress import progress_line, reported_at
from taskq_cli.json_preview import preview_json, whole_json
from taskq_cli.options import (
    DsnOption,
    JobIdArgument,
    JsonOption,
    SchemaOption,
    load_settings,
    run_async,
    status_option,
)
from taskq_cli.workflow_progress import JobWorkflow, read_job_workflow
from taskq_core.backend.protocol import (
    ArchivedJob,
    Backend,
    EventRow,
    JobRow,
)
from taskq_core.backend.protocol.admin import JobPage, JobQuery
from taskq_core.errors import JobNotFoundError
from taskq_core.explain import ExplainSettings, Explanation, explain_job, job_origin
from taskq_core.explain import workflow as workflow_explain
from taskq_core.statemachine import JobStatus

if TYPE_CHECKING:
    from uuid import UUID

    from taskq_core.settings import TaskqSettings

# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
app = typer.Typer(
    help="Inspect jobs: list, show one, explain why one is not running.", no_args_is_help=True
)
# Fixing stuck work (requeue, fail, move, purge) lives in its own module.
app.command("requeue")(jobs_repair.requeue)
app.command("fail")(jobs_repair.fail)
app.command("move")(jobs_repair.move)
app.command("purge")(jobs_repair.purge)
app.command("reclaims")(reclaims.reclaims)

DEFAULT_LIMIT = 100
MAX_LIMIT = 100_000
# `jobs list` counts the matches up to this many; past it the total says "more than".
COUNT_MAX = 100_000
_STATUSES = frozenset(JobStatus)

StatusOption = Annotated[
    list[str] | None, status_option("Only jobs in this status (repeat, or a,b).", _STATUSES)
]


@app.command("list")
def list_jobs(
    ctx: typer.Context,
    status: StatusOption = None,
    queue: Annotated[
        list[str] | None, typer.Option("--queue", help="Only this queue (repeat for several).")
    ] = None,
    actor: Annotated[
        list[str] | None, typer.Option("--actor", help="Only this actor (repeat for several).")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Created at or after: how long ago (2h, 7d) or a time."),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="Created before: how long ago (30m) or an ISO-8601 time."),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", help=f"At most N jobs, newest first (max {MAX_LIMIT}).")
    ] = DEFAULT_LIMIT,
    cursor: Annotated[
        str | None,
        typer.Option("--cursor", help="Continue after a page: its next_cursor (from --json)."),
    ] = None,
    json: JsonOption = False,
    output_option: output.OutputOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """List jobs, newest first; filters of different kinds narrow, repeats of one widen."""
    shape = output.output_format(output_option, json)
    statuses = inputs.parse_statuses(status, allowed=_STATUSES)
    query = JobQuery(
        statuses=None if statuses is None else tuple(statuses),
        queues=inputs.parse_names(queue, "--queue"),
        actors=inputs.parse_names(actor, "--actor"),
        created_since=None if since is None else inputs.parse_time_bound(since, "--since"),
        created_until=None if until is None else inputs.parse_time_bound(until, "--until"),
        after=None if cursor is None else job_cursor.decode(cursor),
        limit=inputs.check_int(limit, "--limit", minimum=1, maximum=MAX_LIMIT),
        count_max=COUNT_MAX,
    )

    async def run(backend: Backend) -> JobPage:
        return await backend.search_jobs(query)

    page = with_backend(ctx, dsn, schema, run, read=True)
    next_cursor = None if page.next_after is None else job_cursor.encode(page.next_after)
    document = {
        "jobs": [job_summary(job) for job in page.jobs],
        "count": len(page.jobs),
        "total": page.total,
        "total_exact": page.total_exact,
        "next_cursor": next_cursor,
    }
    rows = output.job_rows(page.jobs)
    listed = output.print_listing(shape, document, output.JOB_COLUMNS, rows, empty="no jobs match")
    if listed and next_cursor is not None:
        total = f"{page.total}" if page.total_exact else f"more than {page.total}"
        output.note(
            f"showing {len(page.jobs)} of {total}; next page: --cursor {next_cursor} "
            "(or a larger --limit)"
        )


async def _history(backend: Backend, job_ref: str) -> JobDetail:
    """The live job with its attempts and events, else the archived one with its attempts;
    and the batch and the workflow it belongs to, if any."""
    ident = await resolve_job_id(backend, job_ref)
    job = await backend.get(ident)
    if job is not None:
        history = JobDetail(job, await backend.get_attempts(ident), await backend.get_events(ident))
    else:
        archived = await backend.get_archived_job(ident)
        if archived is None:
            raise JobNotFoundError(f"no job with id {ident}")
        attempts = await backend.get_archived_attempts(ident)
        history = JobDetail(archived.job, attempts, [], archived)
    batch = await read_job_batch(backend, history.job.metadata)
    workflow = await read_job_workflow(backend, history.job)
    return replace(history, batch=batch, workflow=workflow)


@app.command("show")
def show(
    ctx: typer.Context,
    job_id: JobIdArgument,
    full: Annotated[
        bool,
        typer.Option(
            "--full", help="Print the whole payload and result (else their first characters)."
        ),
    ] = False,
    json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Show one job: its row, every attempt and the event timeline (archived jobs too).

    A payload or result longer than a screen shows its first characters and its size;
    --full prints it all, and --json always carries the whole values.
    """
    job_ref = check_job_ref(job_id)
    history = with_backend(ctx, dsn, schema, lambda backend: _history(backend, job_ref), read=True)
    if json:
        output.print_json(job_detail_document(history))
        return
    _render_history(history, _web_url(load_settings(ctx, dsn, schema), history.job.id), full=full)


def _web_url(settings: TaskqSettings, job_id: UUID) -> str | None:
    """The job's page in the admin web UI, when TASKQ_ADMIN_URL says where it is."""
    if "admin_url" not in settings.model_fields_set:
        return None
    return f"{settings.admin_url.rstrip('/')}/jobs/{job_id}"


def _shown_json(value: Any, job_id: UUID, *, full: bool) -> str:
    """A payload or result as ``show`` prints it: whole with ``full``, else its preview
    (``json_preview``) and where the rest is."""
    shown = whole_json(value) if full else preview_json(value)
    if not shown.truncated:
        return shown.text
    return f"{shown.text}… ({shown.note(f'taskq jobs show {job_id} --full prints it all')})"


def _render_history(history: JobDetail, web_url: str | None = None, *, full: bool = False) -> None:
    job = history.job
    when = output.timestamp
    archived = history.archived
    if archived is not None:
        output.info(
            f"ARCHIVED: moved to the archive at {when(archived.archived_at)}; deleted for good "
            f"at {when(archived.expire_at)}"
        )
        output.info("")
    error = f"{job.error_class}: {job.error_message}" if job.error_class else None
    cancel = None
    if job.cancel_requested_at is not None:
        cancel = f"requested {when(job.cancel_requested_at)} (phase {job.cancel_phase})"
        if job.cancel_reason:
            cancel += f": {job.cancel_reason}"
    output.print_fields(
        [
            ("id", job.id),
            *([("web", web_url)] if web_url else []),
            ("actor", job.actor),
            ("queue", job.queue),
            ("status", _status_line(job, archived)),
            ("progress", progress_line(job, output.age(reported_at(job)))),
            ("attempt", output.attempt_summary(job)),
            ("priority", job.priority),
            ("origin", job_origin(job)),
            ("batch", None if history.batch is None else history.batch.field()),
            *_workflow_fields(history.workflow),
            ("created", f"{when(job.created_at)} ({output.age(job.created_at)} ago)"),
            ("scheduled", when(job.scheduled_at)),
            ("claimed", when(job.claimed_at)),
            ("started", when(job.started_at)),
            ("finished", when(job.finished_at)),
            ("worker", job.locked_by_worker),
            ("lease until", when(job.lock_expires_at)),
            ("identity key", job.identity_key),
            ("fairness key", job.fairness_key),
            *_unique_fields(job),
            ("deadline", when(job.schedule_to_close)),
            ("cancel", cancel),
            ("error", error),
            ("payload", _shown_json(job.payload, job.id, full=full)),
            ("result", None if job.result is None else _shown_json(job.result, job.id, full=full)),
            ("result expires", when(job.result_expires_at)),
            ("metadata", output.compact_json(job.metadata) if job.metadata else None),
            *_archive_fields(archived),
        ]
    )
    output.info("")
    if history.attempts:
        output.print_table(
            ["#", "outcome", "worker", "started", "duration", "error"],
            [
                (
                    a.attempt,
                    a.outcome,
                    a.worker_id,
                    when(a.started_at),
                    None if a.duration_ms is None else f"{a.duration_ms / 1000:.3f}s",
                    f"{a.error_class}: {a.error_message}" if a.error_class else None,
                )
                for a in history.attempts
            ],
            title="attempts",
        )
    else:
        output.info("attempts: none yet")
    output.info("")
    if history.events:
        output.print_table(
            ["time", "kind", "transition", "worker", "by", "detail"],
            [
                (
                    when(e.occurred_at),
                    e.kind,
                    f"{e.from_status.value if e.from_status else '-'} -> "
                    f"{e.to_status.value if e.to_status else '-'}",
                    e.worker_id,
                    _operator_note(e),
                    _event_detail(e),
                )
                for e in history.events
            ],
            title="events",
        )
    elif archived is not None:
        output.info("events: deleted when the job was archived (by design; attempts are kept)")
    else:
        output.info("events: none yet (enqueueing writes none)")
    if job.error_traceback:
        output.info("")
        output.info("last traceback:")
        output.info(job.error_traceback.rstrip())


# Keys of an event's detail that name the operator who made it (see Audit.detail).
_OPERATOR_KEYS = ("by", "why")


def _operator_note(event: EventRow) -> str | None:
    """``alice@ops-1: why`` for an event an operator caused (None for the rest)."""
    by, why = (event.detail.get(key) for key in _OPERATOR_KEYS)
    if by is None:
        return None
    return f"{by}: {why}" if why else str(by)


def _event_detail(event: EventRow) -> str | None:
    """The rest of the event's detail, as one line of JSON."""
    rest = {k: v for k, v in event.detail.items() if k not in _OPERATOR_KEYS}
    return output.compact_json(rest) if rest else None


def _status_line(job: JobRow, archived: ArchivedJob | None) -> str:
    if archived is not None:
        return f"{job.status.value} (archived)"
    return output.status_line(job)


def _workflow_fields(workflow: JobWorkflow | None) -> list[tuple[str, Any]]:
    """A step's workflow (its state), and what a waiting step waits for."""
    if workflow is None:
        return []
    waits = workflow.waits_for()
    return [("workflow", workflow.field()), *([("waits for", waits)] if waits else [])]


def _unique_fields(job: JobRow) -> list[tuple[str, Any]]:
    """The job's unique key, when it has one, and how long it holds it."""
    if job.unique_key is None:
        return []
    if job.unique_until is None:
        return [("unique key", f"{job.unique_key} (held while the job waits or runs)")]
    until = output.timestamp(job.unique_until)
    return [("unique key", f"{job.unique_key} (held in every state; its window ends {until})")]


def _archive_fields(archived: ArchivedJob | None) -> list[tuple[str, Any]]:
    if archived is None:
        return []
    when = output.timestamp
    return [("archived", when(archived.archived_at)), ("expires", when(archived.expire_at))]


@app.command("explain")
def explain(
    ctx: typer.Context,
    job_id: JobIdArgument,
    json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Why is this job not running? Checks every blocker in dispatch order."""
    job_ref = check_job_ref(job_id)
    settings = load_settings(ctx, dsn, schema)
    explain_settings = ExplainSettings.from_settings(settings)

    async def run() -> Explanation:
        async with open_backend(settings, read=True) as backend:
            ident = await resolve_job_id(backend, job_ref)
            explanation = await explain_job(backend, ident, explain_settings)
            await note_staleness(backend, settings)
            return explanation

    explanation = run_async(run())
    if json:
        output.print_json(_explanation_document(explanation))
        return
    _render_explanation(explanation)


def _check_document(code: str, applies: bool, message: str, facts: dict[str, Any]) -> Any:
    return {"code": code, "applies": applies, "message": message, "facts": facts}


def _explanation_document(explanation: Explanation) -> dict[str, Any]:
    job = explanation.job
    verdict = explanation.verdict
    return {
        "job_id": job.id,
        "actor": job.actor,
        "queue": job.queue,
        "status": job.status,
        "situation": explanation.situation,
        "archived": explanation.situation == "archived",
        "now": explanation.now,
        "origin": explanation.origin,
        "verdict": _check_document(verdict.code, True, verdict.message, verdict.facts),
        "checks": [
            _check_document(c.code, c.applies, c.message, c.facts) for c in explanation.checks
        ],
    }


def _mark(applies: bool) -> Text:
    return output.styled("BLOCKS", "bold red") if applies else output.styled("ok", "green")


def _render_explanation(explanation: Explanation) -> None:
    job = explanation.job
    verdict = explanation.verdict
    output.info(
        f"job {job.id} (actor {job.actor!r}, queue {job.queue!r}) is {job_state(explanation)}"
    )
    if explanation.origin is not None:
        output.info(explanation.origin)
    output.info(f"{verdict_label(explanation)}: {verdict.message}")
    if verdict.code == workflow_explain.CODE:
        _render_dependencies(verdict.facts["dependencies"])
        return
    if explanation.situation != "waiting":
        return
    output.info("")
    output.print_table(
        ["", "check", "finding"],
        [(_mark(c.applies), c.code, c.message) for c in explanation.checks],
        title="checks, in dispatch order",
    )


def _render_dependencies(dependencies: list[dict[str, Any]]) -> None:
    """A waiting step's dependencies and their statuses."""
    if not dependencies:
        return
    output.info("")
    output.print_table(
        [output.Column("step"), output.Column("status"), output.Column("job", "id")],
        [(d["step"], output.status_cell(d["status"].value), d["job_id"]) for d in dependencies],
        title="dependencies",
    )
