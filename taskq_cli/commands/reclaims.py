"""``taskq jobs reclaims``: the reclaim feed from a shell.

Every job the leader took back from a worker that stopped answering (its lease ran out), or
an operator requeued: when, which job (actor, queue), what it was, what became of it (back
to pending, crashed, cancelled, failed as a poison job) and the worker that held it. The
listing reads forward from ``--after`` (an event id, oldest first); ``--follow`` keeps
printing new ones until Ctrl-C (exit 0), one JSON object per line with ``--json``. Events
show once past TASKQ_RECLAIM_EVENT_VISIBILITY_DELAY, so the cursor never skips one.
"""

from __future__ import annotations

import json as jsonlib
import sys
from collections.abc import Sequence
from contextlib import aclosing
from datetime import timedelta
from typing import Annotated, Any

import typer

from taskq_cli import inputs, output
from taskq_cli.database import open_backend
from taskq_cli.options import DsnOption, SchemaOption, load_settings, run_async
from taskq_core.backend.protocol import Backend, EventRow, JobFilter, JobRow
from taskq_core.settings import TaskqSettings
from taskq_core.terminal_text import terminal_safe

DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000
# How often --follow polls when no wake notification arrives (one does on every reclaim).
FOLLOW_POLL_INTERVAL = 2.0

# Ids are copied whole: never cut; the event id is the cursor for --after. On a narrow
# terminal the worker goes first, then the previous status, the queue and the actor.
COLUMNS = (
    output.Column("event", "number"),
    output.Column("time", "number", drop=2),
    output.Column("job", "id"),
    output.Column("actor", drop=3),
    output.Column("queue", drop=4),
    output.Column("from", drop=5),
    output.Column("what happened"),
    output.Column("worker", "id", drop=6),
)


def what_happened(event: EventRow) -> str:
    """The reclaim in words: where the job went and why."""
    detail = event.detail
    to_state = str(detail.get("to_state") or (event.to_status and event.to_status.value))
    by_operator = detail.get("reason") == "operator_requeue"
    if detail.get("poison"):
        return f"failed: poison job ({detail.get('crashes')} workers died running it)"
    if to_state == "pending":
        if detail.get("started") is False:
            return "back to pending (its body never started; attempt given back)"
        return "requeued by an operator to pending" if by_operator else "reclaimed to pending"
    if to_state == "crashed":
        return "crashed (no retries left)"
    if to_state == "cancelled":
        return "cancelled (a cancel was asked)"
    return to_state


def _document(event: EventRow, job: JobRow | None) -> dict[str, Any]:
    detail = event.detail
    return {
        "id": event.id,
        "occurred_at": event.occurred_at,
        "job_id": event.job_id,
        "actor": None if job is None else job.actor,
        "queue": None if job is None else job.queue,
        "from_status": event.from_status,
        "to_status": event.to_status,
        "what": what_happened(event),
        "reason": detail.get("reason"),
        "started": detail.get("started"),
        "poison": bool(detail.get("poison")),
        "worker_id": event.worker_id,
        "detail": detail,
    }


def _row(event: EventRow, job: JobRow | None) -> list[Any]:
    return [
        event.id,
        output.timestamp(event.occurred_at),
        event.job_id,
        None if job is None else job.actor,
        None if job is None else job.queue,
        None if event.from_status is None else event.from_status.value,
        what_happened(event),
        event.worker_id,
    ]


async def _jobs_of(backend: Backend, events: Sequence[EventRow]) -> dict[Any, JobRow]:
    """The events' jobs in one read (a pruned job is simply missing)."""
    ids = list({event.job_id for event in events})
    if not ids:
        return {}
    return {job.id: job for job in await backend.list_jobs(JobFilter(ids=ids, limit=None))}


# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
def reclaims(
    ctx: typer.Context,
    after: Annotated[
        int | None,
        typer.Option(
            "--after", help="Only events after this event id (the 'event' column); default: all."
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            help=f"At most N events (default {DEFAULT_LIMIT}; with --follow: until Ctrl-C).",
        ),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option("--follow", "-f", help="Keep printing new reclaims until Ctrl-C."),
    ] = False,
    json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print one JSON document; with --follow, one JSON object per line."
        ),
    ] = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """List jobs taken back from dead workers (oldest first), or follow them as they come."""
    if after is not None:
        inputs.check_int(after, "--after", minimum=0, maximum=sys.maxsize)
    if limit is not None:
        inputs.check_int(limit, "--limit", minimum=1, maximum=MAX_LIMIT)
    settings = load_settings(ctx, dsn, schema)
    if follow:
        try:
            run_async(_follow(settings, after, limit, json))
        except KeyboardInterrupt:
            pass  # Ctrl-C is how a follow ends
        return
    _list(settings, after or 0, limit or DEFAULT_LIMIT, json)


def _list(settings: TaskqSettings, after: int, limit: int, json: bool) -> None:
    delay = settings.reclaim_event_visibility_delay

    async def run() -> tuple[list[EventRow], dict[Any, JobRow]]:
        async with open_backend(settings) as backend:
            events = await backend.poll_reclaim_events(
                after, limit, visibility_delay=timedelta(seconds=delay)
            )
            return events, await _jobs_of(backend, events)

    events, jobs = run_async(run())
    next_after = events[-1].id if events else after
    if json:
        output.print_json(
            {
                "events": [_document(e, jobs.get(e.job_id)) for e in events],
                "count": len(events),
                "next_after": next_after,
            }
        )
        return
    if not events:
        output.note(f"no reclaims after event {after}" if after else "no reclaims")
        return
    output.print_table(COLUMNS, [_row(e, jobs.get(e.job_id)) for e in events])
    if len(events) == limit:
        output.note(f"showing {len(events)}; the next ones: --after {next_after}")


async def _follow(
    settings: TaskqSettings, after: int | None, limit: int | None, json: bool
) -> None:
    """Print reclaims as they come (after ``after``, else from now), ``limit`` at most."""
    from taskq_core.client import JobsClient

    async with open_backend(settings) as backend:
        start = await backend.get_latest_reclaim_event_id() if after is None else after
        output.note(f"following reclaims after event {start} (Ctrl-C stops)")
        async with JobsClient(backend=backend) as client:
            feed = client.watch_reclaims(
                start,
                poll_interval=FOLLOW_POLL_INTERVAL,
                visibility_delay=settings.reclaim_event_visibility_delay,
            )
            shown = 0
            async with aclosing(feed):
                async for event in feed:
                    job = (await _jobs_of(backend, [event])).get(event.job_id)
                    _print_followed(event, job, json)
                    shown += 1
                    if limit is not None and shown >= limit:
                        return


def _print_followed(event: EventRow, job: JobRow | None, json: bool) -> None:
    if json:
        line = jsonlib.dumps(output.to_jsonable(_document(event, job)), sort_keys=False)
        sys.stdout.write(line + "\n")
    else:
        actor = "-" if job is None else job.actor
        queue = "-" if job is None else job.queue
        worker = event.worker_id or "-"
        line = (
            f"{event.id}  {output.timestamp(event.occurred_at)}  {event.job_id}  {actor}  "
            f"{queue}  {what_happened(event)}  worker {worker}"
        )
        sys.stdout.write(terminal_safe(line) + "\n")
    sys.stdout.flush()
