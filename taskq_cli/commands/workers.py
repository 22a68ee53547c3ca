"""``taskq workers list``: every registered worker, whether it is alive, and who leads.

A worker row says ``running`` until the worker marks itself stopped; one that died without
doing so is shown as ``stale`` once its heartbeat is older than a live worker's can be
(heartbeat interval x (max failures + 1), the point at which a worker isolates itself).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from taskq_cli import output
from taskq_cli.database import with_backend
from taskq_cli.options import DsnOption, JsonOption, SchemaOption, load_settings
from taskq_core.backend.protocol import Backend, WorkerRow
from taskq_core.liveness import worker_stale_after, worker_state

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
    }


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

    registered = with_backend(ctx, dsn, schema, run)
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
                output.styled(state, _STATE_STYLES.get(state, "")),
                f"{output.age(w.last_seen_at, reference)} ago",
                "yes" if w.is_leader else "",
                output.worker_load(w.running_jobs, w.claimed_jobs, w.concurrency),
                ",".join(w.queues),
            )
            for w, state in listed
        ],
        empty=empty,
    )
