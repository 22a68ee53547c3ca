"""``taskq jobs requeue|fail|move|purge``: fixing stuck work from the shell.

``requeue`` and ``fail`` settle one running job now, by the rules a worker's own write
follows and fenced the same way: the worker that still runs the body loses its lease, so
whatever it writes later changes nothing (its heartbeat sees the job gone and cancels the
body). ``move`` takes waiting jobs to another queue (one by id, or a filter); ``purge``
deletes jobs by filter, never running ones (cancel or requeue those first), and counts with
``--dry-run``. A filter's move or purge asks on a terminal and needs ``--yes`` in a script,
as bulk ``cancel`` and ``retry`` and ``taskq prune`` do. Each records who (user@host) and
why (``--reason``): in the job's events, or for a purge in the operator log.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

import typer

from taskq_cli import inputs, output
from taskq_cli.commands.cancel_retry import (
    bulk_filter,
    check_known,
    describe,
    filter_document,
    refuse_filters,
)
from taskq_cli.confirm import confirm_or_refuse
from taskq_cli.database import with_backend
from taskq_cli.job_ids import check_job_ref, live_job, resolve_job_id
from taskq_cli.operator import ReasonOption, audit
from taskq_cli.options import (
    ActorFilterOption,
    DsnOption,
    JobIdArgument,
    QueueFilterOption,
    SchemaOption,
    YesOption,
    status_option,
)
from taskq_core.backend.protocol import Backend, JobFilter, JobRow
from taskq_core.backend.protocol.admin import (
    MOVABLE_STATUSES,
    PURGEABLE_STATUSES,
    Audit,
    ForcedEnd,
    ForcedEndResult,
    PurgeResult,
)
from taskq_core.errors import ConfigError, InvalidTransitionError, JobNotFoundError
from taskq_core.statemachine import JobStatus

MoveStatusOption = Annotated[
    list[str] | None,
    status_option("Only jobs in this status: pending, scheduled (repeat).", MOVABLE_STATUSES),
]
PurgeStatusOption = Annotated[
    list[str] | None,
    status_option("Only jobs in this status (repeat); never running.", PURGEABLE_STATUSES),
]


def _names(statuses: frozenset[JobStatus]) -> str:
    return ", ".join(s.value for s in JobStatus if s in statuses)


# --- requeue and fail ------------------------------------------------------------------------
def _settle_fields(job: JobRow | None) -> dict[str, Any]:
    if job is None:
        return {}
    return {
        "status": job.status,
        "attempt": job.attempt,
        "attempts_used": job.attempts_used,
        "locked_by_worker": job.locked_by_worker,
        "error_class": job.error_class,
    }


def _end(
    ctx: typer.Context,
    dsn: str | None,
    schema: str | None,
    job_id: str,
    end: ForcedEnd,
    reason: str | None,
    json: bool,
) -> None:
    """Requeue or fail one running job and report what became of it."""
    job_ref = check_job_ref(job_id)
    who = audit(reason)

    async def run(backend: Backend) -> tuple[UUID, JobRow, ForcedEndResult]:
        ident = await resolve_job_id(backend, job_ref)
        before = await live_job(backend, ident, end)
        return ident, before, await backend.end_running_job(ident, end, who)

    ident, before, result = with_backend(ctx, dsn, schema, run)
    after = result.job
    if after is None:
        raise JobNotFoundError(f"no job with id {ident}")
    if not result.settled:
        raise InvalidTransitionError(_not_running(ident, end, after))
    if json:
        output.print_json(
            {
                "job_id": ident,
                "action": end,
                "status": after.status,
                "changed": output.changes(_settle_fields(before), _settle_fields(after)),
                "previous_worker": before.locked_by_worker,
                "by": who.by,
                "reason": who.reason,
            }
        )
        return
    output.info(_settled_line(ident, end, before, after))


def _not_running(ident: UUID, end: ForcedEnd, job: JobRow) -> str:
    """Why a requeue or fail changed nothing, and what to use instead."""
    verb = "requeued" if end == "requeue" else "failed"
    if job.status in MOVABLE_STATUSES:
        hint = (
            "it already waits for a worker (jobs explain says why it has not started)"
            if end == "requeue"
            else "cancel it instead"
        )
        return f"job {ident} is {job.status.value}: only a running job can be {verb}; {hint}"
    return f"job {ident} is {job.status.value}: only a running job can be {verb}" + (
        "; taskq retry re-pends a finished one" if end == "requeue" else ""
    )


def _settled_line(ident: UUID, end: ForcedEnd, before: JobRow, after: JobRow) -> str:
    worker = f"worker {before.locked_by_worker} lost its lease"
    status = after.status
    if status is JobStatus.CANCELLED:
        return f"{ident} had a cancel in flight: it ended cancelled ({worker})"
    if end == "fail":
        return f"failed {ident} ({worker})"
    if status is JobStatus.PENDING:
        used = f"{after.attempts_spent}/{after.attempt_budget}"
        return f"requeued {ident}: pending, due now ({worker}; attempts used {used})"
    spent = f"{before.attempts_spent}/{before.attempt_budget}"
    return (
        f"{ident} was on its last attempt ({spent}): it ended {status.value}, as a reclaim "
        f"would end it ({worker}); taskq retry {ident} re-pends it with a fresh attempt budget"
    )


# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
# requeue and fail mirror each other on purpose: one forced end (_end) under two verbs,
# each its own command with its own help.
def requeue(
    ctx: typer.Context,
    job_id: JobIdArgument,
    reason: ReasonOption = None,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Take a running job from its worker now and pend it again (as a reclaim would).

    The interrupted attempt counts; on its last attempt the job ends crashed. A claimed job
    whose body never started gets its attempt back.
    """
    _end(ctx, dsn, schema, job_id, "requeue", reason, json)


def fail(
    ctx: typer.Context,
    job_id: JobIdArgument,
    reason: ReasonOption = None,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """End a running job failed now; its worker's later writes change nothing."""
    _end(ctx, dsn, schema, job_id, "fail", reason, json)


# --- move ------------------------------------------------------------------------------------
def move(
    ctx: typer.Context,
    job_id: Annotated[
        str | None,
        typer.Argument(
            help="Job id (the UUID or a unique prefix or suffix); omit it to move a filter.",
            metavar="ID",
        ),
    ] = None,
    to: Annotated[str | None, typer.Option("--to", help="The queue to move the jobs to.")] = None,
    queue: QueueFilterOption = None,
    actor: ActorFilterOption = None,
    status: MoveStatusOption = None,
    reason: ReasonOption = None,
    yes: YesOption = False,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Move waiting (pending, scheduled) jobs to another queue, keeping their place in time."""
    if to is None:
        raise ConfigError("give --to QUEUE: the queue to move the jobs to")
    target = inputs.new_name(to, "queue", "--to")
    who = audit(reason)
    if job_id is not None:
        refuse_filters(queue, actor, status, "--queue/--actor/--status")
        _move_one(ctx, dsn, schema, check_job_ref(job_id), target, who, json)
        return
    if queue is None and actor is None:
        raise ConfigError("give a job id, or --queue and/or --actor (with --yes) to move many")
    statuses = inputs.parse_statuses(status, allowed=MOVABLE_STATUSES)
    job_filter = bulk_filter(
        sorted(MOVABLE_STATUSES) if statuses is None else statuses, queue, actor
    )
    if job_filter.queue == target:
        raise ConfigError(f"the jobs of {target!r} are in {target!r} already")

    async def run(backend: Backend) -> int:
        await check_known(backend, job_filter)
        if not yes:
            matched = await backend.count_jobs(job_filter)
            what = f"{matched} job(s) ({describe(job_filter)}) to {target!r}"
            confirm_or_refuse(f"Move {what}?", f"move would take {what}", yes=False)
        return await backend.move_where(job_filter, target, who)

    moved = with_backend(ctx, dsn, schema, run)
    if json:
        output.print_json(
            {"filter": filter_document(job_filter), "to_queue": target, "moved": moved}
        )
        return
    output.info(f"moved {moved} waiting job(s) to {target!r} ({describe(job_filter)})")


def _move_one(
    ctx: typer.Context,
    dsn: str | None,
    schema: str | None,
    job_ref: str,
    target: str,
    who: Audit,
    json: bool,
) -> None:
    async def run(backend: Backend) -> tuple[UUID, JobRow, JobRow, int]:
        ident = await resolve_job_id(backend, job_ref)
        before = await live_job(backend, ident, "move")
        moved = await backend.move_where(JobFilter(ids=[ident], limit=None), target, who)
        after = await backend.get(ident)
        return ident, before, after or before, moved

    ident, before, after, moved = with_backend(ctx, dsn, schema, run)
    if not moved and after.queue != target:
        raise InvalidTransitionError(
            f"job {ident} is {after.status.value}: only waiting jobs "
            f"({_names(MOVABLE_STATUSES)}) can move to another queue"
        )
    if json:
        output.print_json(
            {
                "job_id": ident,
                "changed": output.changes({"queue": before.queue}, {"queue": after.queue}),
                "status": after.status,
                "queue": after.queue,
            }
        )
        return
    if not moved:
        output.info(f"{ident} is in {target!r} already")
        return
    output.info(f"moved {ident} from {before.queue!r} to {target!r} ({after.status.value})")


# --- purge -----------------------------------------------------------------------------------
def purge(
    ctx: typer.Context,
    queue: QueueFilterOption = None,
    actor: ActorFilterOption = None,
    status: PurgeStatusOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be deleted; delete nothing.")
    ] = False,
    reason: ReasonOption = None,
    yes: YesOption = False,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Delete jobs by filter, with their attempts and events (never running ones).

    Asks on a terminal; a script needs --yes (or --dry-run to count). Who and why go to the
    operator log.
    """
    if queue is None and actor is None and not status:
        raise ConfigError("give --queue, --actor and/or --status: purge never deletes every job")
    if status and JobStatus.RUNNING.value in {s.strip() for v in status for s in v.split(",")}:
        raise ConfigError(
            "purge never deletes running jobs: a worker holds them; "
            "cancel or requeue them first (taskq cancel, taskq jobs requeue)"
        )
    job_filter = bulk_filter(
        inputs.parse_statuses(status, allowed=PURGEABLE_STATUSES), queue, actor
    )
    who = audit(reason)

    async def run(backend: Backend) -> PurgeResult:
        await check_known(backend, job_filter)
        if dry_run:
            return await _count_purge(backend, job_filter)
        if not yes:
            counted = await _count_purge(backend, job_filter)
            what = f"{counted.total} job(s) ({describe(job_filter)})"
            confirm_or_refuse(
                f"Delete {what} for good?",
                f"purge would delete {what} for good (--dry-run counts them)",
                yes=False,
            )
        return await backend.purge_where(job_filter, who)

    result = with_backend(ctx, dsn, schema, run)
    if json:
        output.print_json(
            {
                "filter": filter_document(job_filter),
                "dry_run": dry_run,
                "deleted": {s.value: n for s, n in result.deleted.items()},
                "total": result.total,
                "running_skipped": result.running_skipped,
            }
        )
        return
    verb = "would delete" if dry_run else "deleted"
    counts = ", ".join(f"{n} {s.value}" for s, n in result.deleted.items()) or "nothing"
    output.info(f"{verb} {result.total} job(s): {counts} ({describe(job_filter)})")
    if result.running_skipped:
        output.note(
            f"{result.running_skipped} running job(s) match and are left alone: cancel or "
            "requeue them first"
        )


async def _count_purge(backend: Backend, job_filter: JobFilter) -> PurgeResult:
    """What ``purge_where`` would do, counted per status, deleting nothing."""
    chosen = job_filter.statuses()
    counts: dict[JobStatus, int] = {}
    for status in JobStatus:
        if chosen is None or status in chosen:
            one = JobFilter(
                status=status, queue=job_filter.queue, actor=job_filter.actor, limit=None
            )
            if count := await backend.count_jobs(one):
                counts[status] = count
    running = counts.pop(JobStatus.RUNNING, 0)
    return PurgeResult(deleted=counts, running_skipped=running)
