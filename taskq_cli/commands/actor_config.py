"""``taskq actor-config list|get|set|diff``: the operator-owned capacity of each actor.

A worker creates an actor's row from its ``@actor`` literals the first time it registers
it; from then on the capacity fields belong to operators and take effect without a restart.
Clearing writes NULL, which means different things per field: ``max_concurrent`` NULL is
unlimited (dispatch cannot see the code literal once a row exists), while ``max_pending``
and ``result_ttl`` NULL fall back to the ``@actor`` literal. ``diff`` compares the rows with
a registry and exits 1 on structural drift (queue, metadata), the kind that stops a worker.
The retry policy and priority shown by ``get`` (and ``--json``) are the code's, rewritten at
every worker start; a by-name ``taskq enqueue`` uses them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

import typer

from taskq_cli import inputs, output
from taskq_cli.database import with_backend
from taskq_cli.operator import ReasonOption, audit
from taskq_cli.options import DsnOption, JsonOption, SchemaOption
from taskq_core.actor_config import CODE_OWNED_FIELDS, diff_against_code
from taskq_core.actors import load_registry
from taskq_core.backend.protocol import UNSET, ActorConfigRow, Backend
from taskq_core.backend.protocol.admin import OperatorLogEntry
from taskq_core.durations import format_duration
from taskq_core.errors import ActorConfigDriftError, ConfigError

# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
app = typer.Typer(
    help="Operator-owned actor capacity: max_concurrent, max_pending, result_ttl.",
    no_args_is_help=True,
)

NameArgument = Annotated[str, typer.Argument(help="Actor name.", metavar="NAME")]
_CODE_DEFAULT = "(@actor literal)"
_STRUCTURAL = frozenset({"queue", "metadata"})
# Retry policy and priority: the code's, written at every worker start (not operator-owned).
_NOT_STORED = "(not stored: written at the next worker start)"


def actor_config_document(row: ActorConfigRow) -> dict[str, Any]:
    """One row for ``--json``; NULL capacity stays null (see the module docstring), and so do
    the retry policy and priority until a worker that declares them has started."""
    return {
        "actor": row.actor,
        "queue": row.queue,
        "metadata": row.metadata,
        "max_concurrent": row.max_concurrent,
        "max_pending": row.max_pending,
        "result_ttl_seconds": output.seconds(row.result_ttl),
        "retry": None
        if row.retry_kind is None
        else {
            "kind": row.retry_kind,
            "max_attempts": row.max_attempts,
            "time_budget_seconds": output.seconds(row.retry_time_budget),
        },
        "priority": row.priority,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def _retry(row: ActorConfigRow) -> str:
    """``transient, 2 attempts`` / ``indefinite, within 1h`` / ``non_retryable``."""
    if row.retry_kind is None:
        return _NOT_STORED
    if row.retry_kind == "transient":
        return f"transient, {row.max_attempts} attempt{'' if row.max_attempts == 1 else 's'}"
    if row.retry_kind == "indefinite" and row.retry_time_budget is not None:
        return f"indefinite, within {format_duration(row.retry_time_budget)}"
    return row.retry_kind


def _max_concurrent(value: int | None) -> str:
    return "unlimited" if value is None else str(value)


def _or_literal(value: int | timedelta | None) -> str:
    if value is None:
        return _CODE_DEFAULT
    return format_duration(value) if isinstance(value, timedelta) else str(value)


def _unknown(name: str) -> ConfigError:
    return ConfigError(
        f"unknown actor {name!r}: no worker has registered it (actor-config list shows the "
        "known ones)"
    )


# Alike queues.list_queues by shape only: each listing reads its own rows and gives
# print_listing its own document, columns and cells.
@app.command("list")
def list_configs(
    ctx: typer.Context,
    json: JsonOption = False,
    output_option: output.OutputOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Every registered actor with its stored capacity."""
    shape = output.output_format(output_option, json)

    async def run(backend: Backend) -> list[ActorConfigRow]:
        return await backend.list_actor_configs()

    rows = with_backend(ctx, dsn, schema, run, read=True)
    output.print_listing(
        shape,
        {"actors": [actor_config_document(row) for row in rows]},
        [
            output.Column("actor"),
            output.Column("queue"),
            output.Column("max_concurrent", "number"),
            output.Column("max_pending", "number"),
            output.Column("result_ttl", drop=1),
            output.Column("updated", drop=2),
        ],
        [
            (
                row.actor,
                row.queue,
                _max_concurrent(row.max_concurrent),
                _or_literal(row.max_pending),
                _or_literal(row.result_ttl),
                f"{output.age(row.updated_at)} ago",
            )
            for row in rows
        ],
        empty="no actors registered yet: a worker registers its actors when it starts",
    )


def _render(row: ActorConfigRow) -> None:
    output.print_fields(
        [
            ("actor", row.actor),
            ("queue", row.queue),
            ("metadata", output.compact_json(row.metadata)),
            ("max_concurrent", _max_concurrent(row.max_concurrent)),
            ("max_pending", _or_literal(row.max_pending)),
            ("result_ttl", _or_literal(row.result_ttl)),
            ("retry", _retry(row)),
            ("priority", _NOT_STORED if row.priority is None else str(row.priority)),
            ("created", output.timestamp(row.created_at)),
            ("updated", f"{output.timestamp(row.updated_at)} ({output.age(row.updated_at)} ago)"),
        ]
    )


@app.command("get")
def get(
    ctx: typer.Context,
    name: NameArgument,
    json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """One actor's stored configuration."""
    inputs.check_text(name, "NAME")

    async def run(backend: Backend) -> tuple[ActorConfigRow | None, list[OperatorLogEntry]]:
        row = await backend.get_actor_config(name)
        if row is None:
            return None, []
        return row, await backend.list_operator_log(
            action="actor_config_set", target=name, limit=_CHANGES_SHOWN
        )

    row, changes = with_backend(ctx, dsn, schema, run)
    if row is None:
        raise _unknown(name)
    if json:
        document = actor_config_document(row)
        document["changes"] = [_change_document(entry) for entry in changes]
        output.print_json(document)
        return
    _render(row)
    if changes:
        output.info("")
        output.print_table(
            ["when", "by", "why", "changed"],
            [
                (
                    f"{output.timestamp(e.occurred_at)} ({output.age(e.occurred_at)} ago)",
                    e.by,
                    e.reason,
                    _changed_text(e.detail.get("changed", {})),
                )
                for e in changes
            ],
            title="operator changes, newest first",
        )


# How many of an actor's latest operator changes ``get`` shows.
_CHANGES_SHOWN = 10


def _change_document(entry: OperatorLogEntry) -> dict[str, Any]:
    return {
        "at": entry.occurred_at,
        "by": entry.by,
        "reason": entry.reason,
        "changed": entry.detail.get("changed", {}),
    }


def _changed_text(changed: dict[str, Any]) -> str:
    """``max_concurrent 4 -> 2, result_ttl - -> 300s``."""

    def shown(field: str, value: Any) -> str:
        if value is None:
            return "-"
        return f"{value:g}s" if field == "result_ttl" else str(value)

    parts = [f"{f} {shown(f, c['from'])} -> {shown(f, c['to'])}" for f, c in changed.items()]
    return ", ".join(parts) or "nothing"


def _pick(value: Any, clear: bool, flag: str) -> Any:
    """The new value of one field: the given one, None to clear, or UNSET to keep."""
    if value is not None and clear:
        raise ConfigError(f"--{flag} and --clear-{flag} contradict each other")
    if clear:
        return None
    return UNSET if value is None else value


@app.command("set")
def set_config(
    ctx: typer.Context,
    name: NameArgument,
    max_concurrent: Annotated[
        int | None,
        typer.Option("--max-concurrent", help="Most running at once, all workers (0 holds)."),
    ] = None,
    max_pending: Annotated[
        int | None,
        typer.Option("--max-pending", help="Most pending+scheduled before enqueue refuses."),
    ] = None,
    result_ttl: Annotated[
        str | None, typer.Option("--result-ttl", help="Keep results this long: 1h, 7d, PT30M.")
    ] = None,
    clear_max_concurrent: Annotated[
        bool, typer.Option("--clear-max-concurrent", help="NULL: unlimited.")
    ] = False,
    clear_max_pending: Annotated[
        bool, typer.Option("--clear-max-pending", help="NULL: back to the @actor literal.")
    ] = False,
    clear_result_ttl: Annotated[
        bool, typer.Option("--clear-result-ttl", help="NULL: back to the @actor literal.")
    ] = False,
    reason: ReasonOption = None,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Change an actor's capacity; live at once, no worker restart.

    Who (user@host), why (--reason) and what changed go to the operator log (shown by get).
    """
    inputs.check_text(name, "NAME")
    who = audit(reason)
    if max_concurrent is not None:
        inputs.check_int(max_concurrent, "--max-concurrent", minimum=0)
    if max_pending is not None:
        inputs.check_int(max_pending, "--max-pending", minimum=0)
    ttl = None if result_ttl is None else inputs.parse_duration_option(result_ttl, "--result-ttl")
    changes = {
        "max_concurrent": _pick(max_concurrent, clear_max_concurrent, "max-concurrent"),
        "max_pending": _pick(max_pending, clear_max_pending, "max-pending"),
        "result_ttl": _pick(ttl, clear_result_ttl, "result-ttl"),
    }
    if all(value is UNSET for value in changes.values()):
        raise ConfigError(
            "nothing to change: give --max-concurrent, --max-pending, --result-ttl or a "
            "--clear-* flag"
        )

    async def run(backend: Backend) -> tuple[ActorConfigRow | None, ActorConfigRow | None]:
        before = await backend.get_actor_config(name)
        return before, await backend.update_actor_config(name, **changes, audit=who)

    before, row = with_backend(ctx, dsn, schema, run)
    if row is None or before is None:
        raise _unknown(name)
    if json:
        output.print_json(
            {
                "actor": row.actor,
                "changed": output.changes(_capacity(before), _capacity(row)),
                "config": actor_config_document(row),
            }
        )
        return
    _render(row)


def _capacity(row: ActorConfigRow) -> dict[str, Any]:
    """The operator-owned fields ``set`` can change (the TTL in seconds, as documents say)."""
    return {
        "max_concurrent": row.max_concurrent,
        "max_pending": row.max_pending,
        "result_ttl_seconds": output.seconds(row.result_ttl),
    }


def _shown(value: Any) -> str:
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, dict | list):
        return output.compact_json(value)
    return "-" if value is None else str(value)


def _kind(field: str) -> str:
    if field == "*":
        return "new"
    if field in CODE_OWNED_FIELDS:
        return "update"
    return "drift" if field in _STRUCTURAL else "override"


@app.command("diff")
def diff(
    ctx: typer.Context,
    actors: Annotated[
        str, typer.Option("--actors", help="MODULE:ATTR of the registry to compare with.")
    ],
    json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Compare stored rows with the code; exit 1 on queue/metadata drift.

    Kinds: ``drift`` (queue or metadata differ: a worker refuses to start), ``override``
    (an operator's capacity differs from the literal: expected), ``update`` (retry policy
    or priority differ: the next worker start writes the code's), ``new`` (no row yet: the
    next worker creates it).
    """
    registry = load_registry(inputs.check_registry_spec(actors))

    async def run(backend: Backend) -> list[ActorConfigRow]:
        return await backend.list_actor_configs()

    rows = with_backend(ctx, dsn, schema, run)
    differences = [
        {**d, "kind": _kind(d["field"])} for d in diff_against_code(rows, registry.values())
    ]
    drift = [d for d in differences if d["kind"] == "drift"]
    if json:
        output.print_json(
            {
                "actors": len(registry),
                "drift": bool(drift),
                "differences": [
                    {**d, "field": None if d["field"] == "*" else d["field"]} for d in differences
                ],
            }
        )
    elif differences:
        output.print_table(
            ["actor", "field", "stored", "code", "kind"],
            [
                (d["actor"], d["field"], _shown(d["stored"]), _shown(d["code"]), d["kind"])
                for d in differences
            ],
        )
    else:
        output.info(f"actor_config matches the code for all {len(registry)} actor(s)")
    if drift:
        described = "; ".join(f"{d['actor']}.{d['field']}" for d in drift)
        raise ActorConfigDriftError(
            f"actor config drift in {described}: workers with this code refuse to start "
            "(deploy one with --force-update-actor-config to overwrite)"
        )
