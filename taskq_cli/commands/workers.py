"""``taskq workers list|ack``: every registered worker, whether it is alive, and who leads;
acknowledging a stale one's alert.

A worker row says ``running`` until the worker marks itself stopped (or its workgroup
supervisor does, with the exit it saw); one that died without either is shown as ``stale``
once its heartbeat is older than a live worker's can be (heartbeat interval x (max failures
+ 1), the point at which a worker isolates itself). A stale worker is an alert in ``taskq top``
and the web UI until ``ack`` acknowledges its silence (who and ``--reason`` go to the operator
log), it is heard from again, or the stale-worker cleanup deletes its row.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from taskq_cli import output
from taskq_cli.database import with_backend
from taskq_cli.operator import ReasonOption, audit
from taskq_cli.options import DsnOption, JsonOption, SchemaOption, load_settings
from taskq_core.backend.protocol import Backend, WorkerRow
from taskq_core.errors import ConfigError
from taskq_core.liveness import silence_acknowledged, worker_stale_after, worker_state
from taskq_core.worker_alerts import WorkerAck, acknowledge_stale_worker

# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
app = typer.Typer(help="Registered workers.", no_args_is_help=True)

# Narrow terminals keep id, host, pid and state; the rest gives way, workgroup first.
_COLUMNS = (
    output.Column("id", "id"),
    output.Column("label", drop=2),
    output.Column("host"),
    output.Column("pid", "number"),
    output.Column("workgroup", drop=7),
    output.Column("state"),
    output.Column("last seen", drop=4),
    output.Column("leader", drop=5),
    output.Column("jobs", drop=3),
    output.Column("queues", drop=6),
)

_STATE_STYLES = {"running": "green", "stale": "red", "stopped": "dim"}


def worker_document(worker: WorkerRow, state: str) -> dict[str, Any]:
    """One worker for ``--json``."""
    return {
        "id": worker.id,
        "label": worker.label,
        "host": worker.hostname,
        "pid": worker.pid,
        "workgroup": worker.workgroup_instance,
        "status": worker.status,
        "state": state,
        "leader": worker.is_leader,
        "last_seen_at": worker.last_seen_at,
        "started_at": worker.started_at,
        "stopped_at": worker.stopped_at,
        "queues": worker.queues,
        "actors": worker.actors,
        "concurrency": worker.concurrency,
        "running_jobs": worker.running_jobs,
        "claimed_jobs": worker.claimed_jobs,
        "version": worker.version,
        "exit_code": worker.exit_code,
        "exit_signal": worker.exit_signal,
        "acknowledged_at": worker.acknowledged_at,
        "acknowledged_by": worker.acknowledged_by,
    }


def state_text(worker: WorkerRow, state: str) -> str:
    """The state column: ``stale, acked`` for an acknowledged silence, ``stopped, SIGKILL`` or
    ``stopped, exit 1`` for an end its supervisor saw (a clean exit 0 says no more)."""
    if state == "stale" and silence_acknowledged(worker):
        return "stale, acked"
    if state == "stopped" and worker.exit_signal:
        return f"stopped, {worker.exit_signal}"
    if state == "stopped" and worker.exit_code:
        return f"stopped, exit {worker.exit_code}"
    return state


@app.command("list")
def list_workers(
    ctx: typer.Context,
    alive: Annotated[
        bool,
        typer.Option("--alive", help="Only live workers: running and heard from recently."),
    ] = False,
    json: JsonOption = False,
    output_option: output.OutputOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Workers, most recently seen first: id, label, host, pid, workgroup, last seen, leader."""
    shape = output.output_format(output_option, json)
    settings = load_settings(ctx, dsn, schema)
    stale_after = worker_stale_after(settings)

    async def run(backend: Backend) -> list[WorkerRow]:
        return await backend.list_workers()

    registered = with_backend(ctx, dsn, schema, run, read=True)
    reference = output.now()
    listed = [(w, worker_state(w, reference, stale_after)) for w in registered]
    if alive:
        listed = [(w, state) for w, state in listed if state == "running"]
    empty = (
        f"no live workers ({len(registered)} stopped or stale; without --alive they are listed)"
        if registered
        else "no workers have registered yet"
    )
    output.print_listing(
        shape,
        {"workers": [worker_document(w, s) for w, s in listed]},
        _COLUMNS,
        [
            (
                w.id,
                w.label,
                w.hostname,
                w.pid,
                w.workgroup_instance,
                output.styled(state_text(w, state), _STATE_STYLES.get(state, "")),
                f"{output.age(w.last_seen_at, reference)} ago",
                "yes" if w.is_leader else "",
                output.worker_load(w.running_jobs, w.claimed_jobs, w.concurrency),
                ",".join(w.queues),
            )
            for w, state in listed
        ],
        empty=empty,
    )


WorkerArgument = Annotated[
    str,
    typer.Argument(help="Worker id: the UUID or a unique prefix of it.", metavar="ID"),
]


def find_worker(rows: list[WorkerRow], text: str) -> WorkerRow:
    """The one registered worker ``text`` names: its id or a unique prefix of it."""
    wanted = text.strip().lower()
    found = [row for row in rows if str(row.id) == wanted or str(row.id).startswith(wanted)]
    if not wanted or not found:
        raise ConfigError(
            f"no worker {text.strip()!r} (taskq workers list shows them; the stale-worker "
            "cleanup deletes a row silent for a day)"
        )
    if len(found) > 1:
        shown = ", ".join(str(row.id) for row in found[:3])
        raise ConfigError(f"worker id {text.strip()!r} is ambiguous ({shown}, ...): give more")
    return found[0]


@app.command("ack")
def ack(
    ctx: typer.Context,
    worker: WorkerArgument,
    reason: ReasonOption = None,
    json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Acknowledge a stale worker's alert: top and the web UI stop warning of its silence.

    Records who (user@host) and ``--reason`` in the operator log. The alert comes back if
    the worker is heard from and then goes silent again; the stale-worker cleanup deletes the
    row later. A running worker is refused; a stopped one raises no alert.
    """
    settings = load_settings(ctx, dsn, schema)
    stale_after = worker_stale_after(settings)
    who = audit(reason)

    async def run(backend: Backend) -> WorkerAck:
        row = find_worker(await backend.list_workers(), worker)
        return await acknowledge_stale_worker(backend, row.id, output.now(), stale_after, who)

    done = with_backend(ctx, dsn, schema, run)
    row = done.worker
    if done.outcome == "not_found" or row is None:
        raise ConfigError(f"worker {worker.strip()!r} is gone (the stale-worker cleanup took it)")
    name = f"{row.label} ({row.hostname}:{row.pid})" if row.label else f"{row.hostname}:{row.pid}"
    if done.outcome == "running":
        raise ConfigError(
            f"worker {name} {row.id} is running (heard from {output.age(row.last_seen_at)} ago): "
            "only a stale worker's alert can be acknowledged"
        )
    if json:
        state = worker_state(row, output.now(), stale_after)
        output.print_json({"outcome": done.outcome, "worker": worker_document(row, state)})
        return
    if done.outcome == "stopped":
        output.info(f"worker {name} {row.id} is stopped: it raises no alert")
    elif done.outcome == "already_acknowledged":
        output.info(
            f"worker {name} {row.id}: its silence was already acknowledged by "
            f"{row.acknowledged_by or 'an operator'} {output.age(row.acknowledged_at)} ago"
        )
    else:
        output.info(
            f"acknowledged stale worker {name} {row.id} (silent for "
            f"{output.age(row.last_seen_at)}): no alert unless it is heard from again"
        )
