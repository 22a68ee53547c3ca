"""``taskq queues list|set-mode|set-max-concurrent|pause|resume``: per-queue dispatch settings.

Dispatch re-reads a queue's row on every call, so each change is live at once (a resume or a
raised cap also wakes the workers). A queue is known when it has jobs or a row; changing an
unknown one is refused (a typo must not pause a queue nobody uses) unless ``--create`` says
it is meant to be configured before its first job.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from taskq_cli import inputs, output
from taskq_cli.database import with_backend
from taskq_cli.operator import ReasonOption, audit
from taskq_cli.options import DsnOption, JsonOption, SchemaOption
from taskq_core.backend.protocol import Backend, QueueMode, QueueRow
from taskq_core.errors import ConfigError
from taskq_core.statemachine import JobStatus

# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
app = typer.Typer(help="List queues and change how dispatch serves them.", no_args_is_help=True)

QueueArgument = Annotated[str, typer.Argument(help="Queue name.", metavar="QUEUE")]
CreateOption = Annotated[
    bool, typer.Option("--create", help="Configure a queue that has no jobs or row yet.")
]


def _modes() -> list[str]:
    return list(inputs.QUEUE_MODES)


def queue_document(row: QueueRow) -> dict[str, Any]:
    """A queue for ``--json``: settings plus a count for every status (zeros included);
    ``claimed``: how many of ``counts.running`` are claimed ahead of a free consumer."""
    counts = {status.value: row.counts.get(status, 0) for status in JobStatus}
    return {
        "name": row.name,
        "mode": row.mode,
        "max_concurrent": row.max_concurrent,
        "paused": row.paused,
        "paused_at": None if row.pause is None else row.pause.paused_at,
        "paused_by": None if row.pause is None else row.pause.paused_by,
        "pause_reason": None if row.pause is None else row.pause.reason,
        "has_row": row.has_row,
        "counts": counts,
        "claimed": row.claimed,
        "total": sum(counts.values()),
    }


def _describe(row: QueueRow) -> str:
    cap = "unlimited" if row.max_concurrent is None else str(row.max_concurrent)
    if row.max_concurrent == 0:
        cap = "0 (none of its jobs start until the cap is raised or cleared)"
    state = (
        f"paused ({_pause_note(row)})"
        if row.paused and row.pause
        else ("paused" if row.paused else "active")
    )
    return f"queue {row.name!r}: {state}, mode {row.mode}, max_concurrent {cap}"


def _pause_note(row: QueueRow) -> str:
    """``5m ago by alice@ops-1: db maintenance`` (the parts known)."""
    pause = row.pause
    if pause is None:
        return ""
    note = f"{output.age(pause.paused_at)} ago"
    if pause.paused_by:
        note += f" by {pause.paused_by}"
    return f"{note}: {pause.reason}" if pause.reason else note


def _paused_cell(row: QueueRow) -> Any:
    if not row.paused:
        return "no"
    note = _pause_note(row)
    return output.styled(f"yes, {note}" if note else "yes", "yellow")


# Alike actor_config.list_configs by shape only: each listing reads its own rows and gives
# print_listing its own document, columns and cells.
@app.command("list")
def list_queues(
    ctx: typer.Context,
    json: JsonOption = False,
    output_option: output.OutputOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Every queue that has jobs or settings: mode, cap, paused, jobs per status."""
    shape = output.output_format(output_option, json)

    async def run(backend: Backend) -> list[QueueRow]:
        return await backend.list_queues()

    rows = with_backend(ctx, dsn, schema, run, read=True)
    output.print_listing(
        shape,
        {"queues": [queue_document(row) for row in rows]},
        _queue_columns(),
        [
            (
                row.name,
                row.mode,
                row.max_concurrent,
                _paused_cell(row),
                *(_count_cell(row, status) for status in JobStatus),
            )
            for row in rows
        ],
        empty="no queues yet: a queue appears with its first job or setting",
    )


def _count_cell(row: QueueRow, status: JobStatus) -> Any:
    """A status's count; running as every view shows it (bodies running, ``+N claimed``)."""
    count = row.counts.get(status, 0)
    if status is JobStatus.RUNNING:
        return output.running_count(count - row.claimed, row.claimed)
    return count


def _queue_columns() -> list[output.Column]:
    """Narrow terminals lose the cap, then the mode, then the rarer terminal counts (all-zero
    counts go first of all); the name, paused and the active counts always show."""
    rare = {JobStatus.CANCELLED, JobStatus.CRASHED, JobStatus.ABANDONED, JobStatus.WAITING}
    return [
        output.Column("queue"),
        output.Column("mode", drop=2),
        output.Column("max_concurrent", "number", drop=3),
        output.Column("paused"),
        *(output.Column(s.value, "number", drop=1 if s in rare else 0) for s in JobStatus),
    ]


def _settings(row: QueueRow | None) -> dict[str, Any]:
    """The settings a queue change can touch (defaults for a queue without a row)."""
    pause = None if row is None else row.pause
    return {
        "mode": "strict_fifo" if row is None else row.mode,
        "max_concurrent": None if row is None else row.max_concurrent,
        "paused": False if row is None else row.paused,
        "paused_by": None if pause is None else pause.paused_by,
        "pause_reason": None if pause is None else pause.reason,
    }


def _update(
    ctx: typer.Context,
    dsn: str | None,
    schema: str | None,
    name: str,
    create: bool,
    json: bool,
    reason: str | None = None,
    *,
    keep_pause: bool = False,
    **changes: Any,
) -> QueueRow:
    """Apply ``changes`` to a known queue (or a new one with ``--create``) and report it:
    in words, or with ``json`` as the fields that changed and the queue after.
    ``keep_pause``: a queue already paused is left as it is (its first note kept)."""
    inputs.check_text(name, "QUEUE")
    if create:
        inputs.new_name(name, "queue", "QUEUE")
    who = audit(reason)  # every change goes to the operator log with who and why

    async def run(backend: Backend) -> tuple[QueueRow | None, QueueRow]:
        before = await backend.get_queue(name)
        if not create and before is None:
            known = [row.name for row in await backend.list_queues()]
            shown = ", ".join(repr(n) for n in known[:10]) or "none yet"
            raise ConfigError(
                f"unknown queue {name!r} (known: {shown}); pass --create to configure a queue "
                "before it has jobs"
            )
        if keep_pause and before is not None and before.paused:
            return before, before
        return before, await backend.update_queue(name, **changes, audit=who)

    before, row = with_backend(ctx, dsn, schema, run)
    kept = keep_pause and before is row
    if json:
        output.print_json(
            {
                "queue": row.name,
                "created": before is None or not before.has_row,
                "changed": output.changes(_settings(before), _settings(row)),
                "settings": queue_document(row),
            }
        )
    else:
        output.info(_describe(row))
    if kept:
        output.warn(
            f"queue {name!r} was already paused: its first note is kept (--force replaces it)"
        )
    return row


@app.command("set-mode")
def set_mode(
    ctx: typer.Context,
    queue: QueueArgument,
    mode: Annotated[
        str,
        typer.Argument(
            help="strict_fifo (priority, then age) or round_robin (by fairness_key).",
            metavar="strict_fifo|round_robin",
            autocompletion=_modes,
        ),
    ],
    create: CreateOption = False,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Set how dispatch orders a queue's jobs."""
    chosen: QueueMode = inputs.parse_mode(mode)
    _update(ctx, dsn, schema, queue, create, json, mode=chosen)


# A negative N ("-1") must reach the argument, and fail as out of range, instead of being
# taken for an unknown option.
@app.command("set-max-concurrent", context_settings={"ignore_unknown_options": True})
def set_max_concurrent(
    ctx: typer.Context,
    queue: QueueArgument,
    limit: Annotated[
        int | None,
        typer.Argument(
            help="Most jobs of the queue running at once (0: none start; --clear: no cap).",
            metavar="N",
        ),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the cap (unlimited).")] = False,
    create: CreateOption = False,
    yes: Annotated[
        bool, typer.Option("--yes", help="Confirm a cap of 0, which starts none of its jobs.")
    ] = False,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Cap how many of a queue's jobs run at once, across all workers (or --clear it)."""
    if (limit is None) == (not clear):
        raise ConfigError("give either N or --clear")
    if limit is not None:
        inputs.check_int(limit, "N", minimum=0)
    if limit == 0 and not yes:
        raise ConfigError(
            "a cap of 0 starts none of the queue's jobs, a pause that records no who or why: "
            f"use `taskq queues pause {queue} --reason ...`, or add --yes to set 0"
        )
    _update(ctx, dsn, schema, queue, create, json, max_concurrent=None if clear else limit)


@app.command("pause")
def pause(
    ctx: typer.Context,
    queue: QueueArgument,
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why (shown in queues list and top).")
    ] = None,
    create: CreateOption = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Pause again over an existing pause, replacing its note."),
    ] = False,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Stop dispatching the queue's jobs (running jobs finish; enqueues still land).

    Records who paused it (user@host), when, and ``--reason``. A queue already paused keeps
    its first pause and note unless ``--force``.
    """
    _update(
        ctx,
        dsn,
        schema,
        queue,
        create,
        json,
        reason,
        keep_pause=not force,
        paused=True,
        paused_by=audit(reason).by,
        pause_reason=inputs.optional_text(reason, "--reason"),
    )


@app.command("resume")
def resume(
    ctx: typer.Context,
    queue: QueueArgument,
    reason: ReasonOption = None,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Dispatch the queue's jobs again (who and --reason go to the operator log)."""
    _update(ctx, dsn, schema, queue, False, json, reason, paused=False)
