"""``taskq cancel`` and ``taskq retry``: change one job, or every job a filter matches.

One job by id, or many by filter. A bulk operation counts what it would change and, without
``--yes``, asks on a terminal (no by default) or, in a script, says so and exits 1, as
``taskq prune`` does. Done, it reports how many rows it changed. Every change records who
did it (user@host) and why (``--reason``) in the events of the jobs it changed
(``taskq jobs show``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar
from uuid import UUID

import typer

from taskq_cli import inputs, output
from taskq_cli.confirm import confirm_or_refuse
from taskq_cli.database import with_backend
from taskq_cli.job_cancel import cancel_one
from taskq_cli.job_ids import check_job_ref, live_job, resolve_job_id
from taskq_cli.operator import ReasonOption, audit
from taskq_cli.options import (
    ActorFilterOption,
    DsnOption,
    QueueFilterOption,
    SchemaOption,
    YesOption,
    status_option,
)
from taskq_core.backend.protocol import (
    Backend,
    BulkCancelResult,
    CancelOutcome,
    JobFilter,
    JobRow,
)
from taskq_core.backend.protocol.admin import Audit
from taskq_core.errors import ConfigError, InvalidTransitionError, JobNotFoundError
from taskq_core.statemachine import ACTIVE_STATUSES, RETRYABLE_STATUSES, JobStatus

T = TypeVar("T")

IdArgument = Annotated[
    str | None,
    typer.Argument(
        help="Job id (the UUID or a unique prefix or suffix of it); omit it to act on a filter.",
        metavar="ID",
    ),
]
CancelReasonOption = Annotated[
    str | None,
    typer.Option("--reason", help="Why (stored on the job and in its event, with who)."),
]
CancelStatusOption = Annotated[
    list[str] | None,
    status_option(
        "Only jobs in this status: pending, scheduled, running, waiting (repeat).",
        ACTIVE_STATUSES,
    ),
]
RetryStatusOption = Annotated[
    list[str] | None,
    status_option(
        "Re-pend jobs in this status: failed, cancelled, crashed (repeat).", RETRYABLE_STATUSES
    ),
]


def refuse_filters(
    queue: str | None, actor: str | None, status: list[str] | None, flags: str
) -> None:
    """With a job id, no filters: a command acts on one job or on those a filter matches
    (``flags`` names the filters in the message)."""
    if queue is not None or actor is not None or status:
        raise ConfigError(f"give a job id or {flags} filters, not both")


def bulk_filter(
    statuses: list[JobStatus] | None, queue: str | None, actor: str | None, **fields: Any
) -> JobFilter:
    """The jobs a bulk change matches: ``statuses``, the checked ``--queue`` and ``--actor``,
    no limit (``fields``: the rest a command adds)."""
    return JobFilter(
        status=statuses,
        queue=inputs.optional_text(queue, "--queue"),
        actor=inputs.optional_text(actor, "--actor"),
        limit=None,
        **fields,
    )


def filter_document(job_filter: JobFilter) -> dict[str, Any]:
    """The filter a bulk change matched, for its ``--json``."""
    statuses = job_filter.statuses()
    return {
        "statuses": None if statuses is None else [s.value for s in JobStatus if s in statuses],
        "queue": job_filter.queue,
        "actor": job_filter.actor,
    }


def describe(job_filter: JobFilter) -> str:
    parts = []
    statuses = job_filter.statuses()
    if statuses is not None:
        parts.append("status " + "|".join(s.value for s in JobStatus if s in statuses))
    if job_filter.queue is not None:
        parts.append(f"queue {job_filter.queue!r}")
    if job_filter.actor is not None:
        parts.append(f"actor {job_filter.actor!r}")
    return ", ".join(parts)


async def check_known(backend: Backend, job_filter: JobFilter) -> None:
    """A filter naming a queue or actor that does not exist is a typo, not 'zero matches'."""
    if job_filter.queue is not None and await backend.get_queue(job_filter.queue) is None:
        known = ", ".join(repr(q.name) for q in (await backend.list_queues())[:10]) or "none"
        raise ConfigError(f"unknown queue {job_filter.queue!r} (known: {known})")
    actor = job_filter.actor
    if (
        actor is not None
        and await backend.get_actor_config(actor) is None
        and await backend.count_jobs(JobFilter(actor=actor, limit=1)) == 0
    ):
        raise ConfigError(f"unknown actor {actor!r}: no worker registered it and no job has it")


def bulk(
    ctx: typer.Context,
    dsn: str | None,
    schema: str | None,
    verb: str,
    job_filter: JobFilter,
    yes: bool,
    apply: Callable[[Backend], Awaitable[T]],
) -> T:
    """Apply a bulk change with --yes; without it, count the matches and ask on a terminal,
    or say so and fail in a script (as ``taskq prune`` does)."""

    async def run(backend: Backend) -> T:
        await check_known(backend, job_filter)
        if not yes:
            matched = await backend.count_jobs(job_filter)
            what = f"{matched} job(s) ({describe(job_filter)})"
            confirm_or_refuse(
                f"{verb.capitalize()} {what}?", f"{verb} would affect {what}", yes=False
            )
        return await apply(backend)

    return with_backend(ctx, dsn, schema, run)


# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
def cancel(
    ctx: typer.Context,
    job_id: IdArgument = None,
    reason: CancelReasonOption = None,
    queue: QueueFilterOption = None,
    actor: ActorFilterOption = None,
    status: CancelStatusOption = None,
    yes: YesOption = False,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Cancel a job (at once when waiting, cooperatively when running), or all that match."""
    who = audit(reason)
    if job_id is not None:
        refuse_filters(queue, actor, status, "--queue/--actor/--status")
        _cancel_one(ctx, dsn, schema, check_job_ref(job_id), who, json)
        return
    if queue is None and actor is None:
        raise ConfigError("give a job id, or --queue and/or --actor (with --yes) to cancel many")
    statuses = inputs.parse_statuses(status, allowed=ACTIVE_STATUSES)
    job_filter = bulk_filter(statuses, queue, actor, active=True if statuses is None else None)

    async def apply(backend: Backend) -> BulkCancelResult:
        return await backend.cancel_where(job_filter, who.reason, audit=who)

    result = bulk(ctx, dsn, schema, "cancel", job_filter, yes, apply)
    if json:
        output.print_json(
            {
                "filter": filter_document(job_filter),
                "cancelled": result.cancelled,
                "requested": result.requested,
            }
        )
        return
    output.info(
        f"cancelled {result.cancelled} waiting job(s); asked {result.requested} running "
        f"job(s) to stop ({describe(job_filter)})"
    )


def _cancel_one(
    ctx: typer.Context,
    dsn: str | None,
    schema: str | None,
    job_ref: str,
    who: Audit,
    json: bool,
) -> None:
    async def run(backend: Backend) -> tuple[UUID, CancelOutcome, JobRow, JobRow]:
        ident = await resolve_job_id(backend, job_ref)
        before = await live_job(backend, ident, "cancel")
        outcome, after = await cancel_one(backend, ident, who.reason, who)
        if after is None:
            raise JobNotFoundError(f"no job with id {ident}")
        return ident, outcome, before, after

    ident, outcome, before, after = with_backend(ctx, dsn, schema, run)
    status = after.status
    if json and (outcome != "terminal" or status is JobStatus.CANCELLED):
        output.print_json(
            {
                "job_id": ident,
                "outcome": outcome,
                "changed": output.changes(_cancel_fields(before), _cancel_fields(after)),
                "status": status,
                "cancel_reason": after.cancel_reason,
            }
        )
        return
    if outcome == "cancelled":
        output.info(f"cancelled {ident}")
    elif outcome == "requested":
        output.info(f"asked {ident} to stop: its worker cancels it cooperatively")
    elif outcome == "already_requested":
        output.info(f"{ident} is already stopping (a cancel was requested before)")
    elif status is JobStatus.CANCELLED:
        output.info(f"{ident} was already cancelled")
    else:
        raise InvalidTransitionError(f"job {ident} is {status.value}: there is nothing to cancel")


def _cancel_fields(job: JobRow) -> dict[str, Any]:
    return {"status": job.status, "cancel_phase": job.cancel_phase}


# retry mirrors cancel on purpose: one job by id or every job the filters match, each verb
# its own command with its own help; the writes behind them differ.
def retry(
    ctx: typer.Context,
    job_id: IdArgument = None,
    status: RetryStatusOption = None,
    queue: QueueFilterOption = None,
    actor: ActorFilterOption = None,
    reason: ReasonOption = None,
    yes: YesOption = False,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Re-pend a failed, crashed or cancelled job with a fresh attempt budget, or all that match."""
    who = audit(reason)
    if job_id is not None:
        refuse_filters(queue, actor, status, "--status/--queue/--actor")
        _retry_one(ctx, dsn, schema, job_id, who, json)
        return
    statuses = inputs.parse_statuses(status, allowed=RETRYABLE_STATUSES)
    if statuses is None:
        raise ConfigError(
            "give a job id, or --status failed|crashed|cancelled (with --yes) to retry many"
        )
    job_filter = bulk_filter(statuses, queue, actor)

    async def apply(backend: Backend) -> int:
        return await backend.retry_where(job_filter, audit=who)

    retried = bulk(ctx, dsn, schema, "retry", job_filter, yes, apply)
    if json:
        output.print_json({"filter": filter_document(job_filter), "retried": retried})
        return
    output.info(f"re-pended {retried} job(s) ({describe(job_filter)})")


def _retry_one(
    ctx: typer.Context, dsn: str | None, schema: str | None, job_id: str, who: Audit, json: bool
) -> None:
    job_ref = check_job_ref(job_id)

    async def run(backend: Backend) -> tuple[UUID, JobStatus, JobStatus | None]:
        ident = await resolve_job_id(backend, job_ref)
        job = await live_job(backend, ident, "retry")
        if await backend.retry_where(JobFilter(ids=[ident], limit=None), audit=who):
            return ident, job.status, None
        after = await backend.get(ident)
        return ident, job.status, job.status if after is None else after.status

    ident, before, blocked_by = with_backend(ctx, dsn, schema, run)
    if blocked_by in RETRYABLE_STATUSES:  # retryable, yet left: its unique key is taken
        raise InvalidTransitionError(
            f"job {ident} stays {blocked_by.value}: another job holds its unique key now "
            "(retry it once that job has ended)"
        )
    if blocked_by is not None:
        allowed = ", ".join(s.value for s in JobStatus if s in RETRYABLE_STATUSES)
        raise InvalidTransitionError(
            f"job {ident} is {blocked_by.value}: only {allowed} jobs can be retried"
        )
    if json:
        output.print_json(
            {
                "job_id": ident,
                "changed": {"status": {"from": before.value, "to": JobStatus.PENDING.value}},
                "status": JobStatus.PENDING,
            }
        )
        return
    output.info(f"re-pended {ident}")
