"""``taskq schedules list|show|add|enable|disable|delete|run``: cron schedules.

A schedule fires its actor at the times its cron expression names in its time zone; the
leader makes exactly one job per fire time. ``add`` makes a schedule that lives only in the
database; ``@cron`` in the code declares the others, and every worker start writes those
back (keeping whether an operator disabled one). ``show`` lists the next fire times in the
schedule's zone and in UTC. ``run`` fires one job now, by hand, whatever the schedule's
times. Input is checked before anything is written (expression, time zone, payload, name).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo

import typer

from taskq_cli import inputs, output
from taskq_cli.database import with_backend
from taskq_cli.job_documents import job_summary
from taskq_cli.operator import ReasonOption, audit
from taskq_cli.options import ActorArgument, DsnOption, JsonOption, SchemaOption
from taskq_core.backend.protocol import (
    ActorConfigRow,
    Backend,
    JobRow,
    ScheduleExistsError,
    ScheduleRecord,
)
from taskq_core.client import JobsClient
from taskq_core.cron_schedules import check_schedule, upcoming_fires
from taskq_core.errors import ConfigError, ScheduleNotFoundError

# Option declarations here mirror other commands' line for line on purpose: typer reads
# each command's options from its own signature (options.py holds the shared ones).
app = typer.Typer(
    help="Cron schedules: list them, show their next fire times, add, enable, disable, "
    "delete, or run one now.",
    no_args_is_help=True,
)

NameArgument = Annotated[str, typer.Argument(help="Schedule name.", metavar="NAME")]
# How many fire times ``show`` lists.
SHOWN_FIRES = 5


def _source(record: ScheduleRecord) -> str:
    return "code" if record.declared_in_code else "database"


def schedule_document(record: ScheduleRecord) -> dict[str, Any]:
    """One schedule for ``--json``. ``source``: ``code`` (declared with ``@cron``, rewritten
    by every worker start) or ``database`` (made with the client or ``schedules add``);
    ``queue`` null: the actor's queue at fire time."""
    return {
        "name": record.name,
        "actor": record.actor,
        "queue": record.queue,
        "cron": record.cron,
        "timezone": record.timezone,
        "payload": record.payload,
        "enabled": record.enabled,
        "next_fire_at": record.next_fire_at,
        "last_fired_at": record.last_fired_at,
        "last_job_id": record.last_job_id,
        "source": _source(record),
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


async def _client(backend: Backend) -> JobsClient:
    """An open client on the command's backend (opening it connects nothing)."""
    client = JobsClient(backend=backend)
    await client.open()
    return client


async def _fetch(backend: Backend, name: str) -> ScheduleRecord:
    """The schedule, or ScheduleNotFoundError."""
    record = await (await _client(backend)).get_schedule(name)
    if record is None:
        raise ScheduleNotFoundError(f"no schedule named {name!r}")
    return record


@app.command("list")
def list_schedules(
    ctx: typer.Context,
    actor: Annotated[
        str | None, typer.Option("--actor", help="Only this actor's schedules.")
    ] = None,
    enabled: Annotated[
        bool | None,
        typer.Option("--enabled/--disabled", help="Only enabled (or only disabled) schedules."),
    ] = None,
    json: JsonOption = False,
    output_option: output.OutputOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Every schedule: actor, expression, whether enabled, next and last fire."""
    shape = output.output_format(output_option, json)
    actor = inputs.optional_name(actor, "--actor")

    async def run(backend: Backend) -> list[ScheduleRecord]:
        return await (await _client(backend)).list_schedules(actor=actor, enabled=enabled)

    records = with_backend(ctx, dsn, schema, run, read=True)
    output.print_listing(
        shape,
        {"schedules": [schedule_document(r) for r in records]},
        [
            output.Column("name"),
            output.Column("actor"),
            output.Column("cron"),
            output.Column("enabled"),
            output.Column("next fire", "number"),
            output.Column("last fired", "number", drop=1),
            output.Column("timezone", drop=2),
            output.Column("source", drop=3),
        ],
        [
            (
                r.name,
                r.actor,
                r.cron,
                _enabled_cell(r.enabled),
                _next_fire_cell(r),
                None if r.last_fired_at is None else f"{output.age(r.last_fired_at)} ago",
                r.timezone,
                _source(r),
            )
            for r in records
        ],
        empty="no schedules match: add one with `taskq schedules add` or @cron",
    )


def _next_fire_cell(record: ScheduleRecord) -> str | None:
    """``in 3m``, or ``due 2m ago`` while the leader has not fired it yet (no leader)."""
    age = output.age(record.next_fire_at)
    if age is None or age.startswith("in "):
        return age
    return f"due {age} ago"


def _enabled_cell(enabled: bool) -> Any:
    return "yes" if enabled else output.styled("no", "yellow")


def _local(record: ScheduleRecord, moment: datetime | None) -> str | None:
    """A time as the schedule's zone reads it (ISO-8601 with that zone's offset)."""
    if moment is None:
        return None
    return output.timestamp(moment.astimezone(ZoneInfo(record.timezone)))


def _fire_times(record: ScheduleRecord) -> list[dict[str, datetime]]:
    """The next fire times, each in the schedule's zone and in UTC."""
    zone = ZoneInfo(record.timezone)
    return [
        {"at": fire.astimezone(zone), "utc": fire} for fire in upcoming_fires(record, SHOWN_FIRES)
    ]


@app.command("show")
def show(
    ctx: typer.Context,
    name: NameArgument,
    json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """One schedule and its next five fire times (in its time zone and in UTC)."""
    inputs.check_text(name, "NAME")
    record = with_backend(ctx, dsn, schema, lambda backend: _fetch(backend, name), read=True)
    fires = _fire_times(record)
    if json:
        output.print_json({**schedule_document(record), "next_fires": fires})
        return
    when = output.timestamp
    last = None
    if record.last_fired_at is not None:
        last = f"{when(record.last_fired_at)} ({output.age(record.last_fired_at)} ago)"
    output.print_fields(
        [
            ("name", record.name),
            ("actor", record.actor),
            ("queue", record.queue or "(the actor's queue)"),
            ("cron", f"{record.cron} ({record.timezone})"),
            ("payload", output.compact_json(record.payload)),
            ("enabled", "yes" if record.enabled else "no (disabled: it does not fire)"),
            ("source", _describe_source(record)),
            ("last fired", last),
            ("last job", record.last_job_id),
            ("created", when(record.created_at)),
            ("updated", when(record.updated_at)),
        ]
    )
    output.info("")
    if not fires:
        output.info("next fire times: none while it is disabled")
        return
    output.print_table(
        [output.Column(f"next fire ({record.timezone})", "id"), output.Column("UTC", "id")],
        [(when(fire["at"]), when(fire["utc"])) for fire in fires],
    )


def _describe_source(record: ScheduleRecord) -> str:
    if record.declared_in_code:
        return "@cron in the code (every worker start rewrites it; enabled stays yours)"
    return "database (made with `schedules add` or the client)"


def _changed(before: ScheduleRecord | None, after: ScheduleRecord | None) -> dict[str, Any]:
    """What a write changed, for ``--json``."""
    old = {} if before is None else schedule_document(before)
    new = {} if after is None else schedule_document(after)
    return output.changes(old, new)


@app.command("add")
def add(
    ctx: typer.Context,
    name: NameArgument,
    actor: ActorArgument,
    cron: Annotated[
        str,
        typer.Argument(
            help="5-field cron expression, quoted: '*/15 * * * *' (minute hour day month weekday).",
            metavar="CRON",
        ),
    ],
    payload: Annotated[
        str | None,
        typer.Option(
            "--payload", help="JSON object of every job; @FILE reads a file, - stdin. Default {}."
        ),
    ] = None,
    timezone: Annotated[
        str,
        typer.Option("--timezone", help="IANA time zone the expression is read in."),
    ] = "UTC",
    queue: Annotated[
        str | None,
        typer.Option("--queue", help="Queue of its jobs (default: the actor's queue)."),
    ] = None,
    reason: ReasonOption = None,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Create a schedule (it lives in the database only) and print its next fire time.

    Who (user@host) and why (--reason) go to the operator log, as for every schedule write.
    """
    inputs.new_name(name, "schedule", "NAME")
    who = audit(reason)
    inputs.check_name(actor, "ACTOR")
    inputs.check_text(cron, "CRON")
    inputs.check_text(timezone, "--timezone")
    schedule = check_schedule(cron, timezone, expression_field="CRON", timezone_field="--timezone")
    document = inputs.parse_payload(payload)
    queue = inputs.optional_new_name(queue, "queue", "--queue")

    async def run(backend: Backend) -> tuple[ActorConfigRow | None, ScheduleRecord]:
        config = await backend.get_actor_config(actor)
        try:
            record = await (await _client(backend)).create_schedule(
                name,
                actor,
                schedule.expression,
                payload=document,
                timezone=timezone,
                queue=queue,
                audit=who,
            )
        except ScheduleExistsError as exc:
            raise ConfigError(f"NAME: {exc}") from None
        return config, record

    config, record = with_backend(ctx, dsn, schema, run)
    if json:
        output.print_json(
            {
                "schedule": record.name,
                "created": True,
                "changed": _changed(None, record),
                "settings": schedule_document(record),
            }
        )
    else:
        output.info(
            f"schedule {record.name!r} created: {record.actor} at {record.cron} "
            f"({record.timezone}), next fire {_local(record, record.next_fire_at)}"
        )
    if config is None:
        output.warn(
            f"no worker has registered actor {actor!r} yet: the schedule fires anyway, and "
            "its jobs wait until a worker with that actor consumes their queue"
        )


def _set_enabled(
    ctx: typer.Context,
    dsn: str | None,
    schema: str | None,
    name: str,
    enabled: bool,
    json: bool,
    reason: str | None,
) -> None:
    inputs.check_text(name, "NAME")
    who = audit(reason)

    async def run(backend: Backend) -> tuple[ScheduleRecord, ScheduleRecord]:
        before = await _fetch(backend, name)
        client = await _client(backend)
        return before, await client.update_schedule(name, enabled=enabled, audit=who)

    before, after = with_backend(ctx, dsn, schema, run)
    if json:
        output.print_json(
            {
                "schedule": after.name,
                "changed": _changed(before, after),
                "settings": schedule_document(after),
            }
        )
        return
    if enabled:
        output.info(
            f"schedule {after.name!r} enabled: next fire {_local(after, after.next_fire_at)}"
        )
    else:
        output.info(f"schedule {after.name!r} disabled: it does not fire until enabled")


# enable and disable mirror each other on purpose: one write (_set_enabled) under two
# verbs, each its own command with its own help; delete takes the same options.
@app.command("enable")
def enable(
    ctx: typer.Context,
    name: NameArgument,
    reason: ReasonOption = None,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Let a schedule fire again, from its next fire time after now (no catch-up)."""
    _set_enabled(ctx, dsn, schema, name, True, json, reason)


@app.command("disable")
def disable(
    ctx: typer.Context,
    name: NameArgument,
    reason: ReasonOption = None,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Stop a schedule firing (a worker start keeps it disabled, even one from @cron)."""
    _set_enabled(ctx, dsn, schema, name, False, json, reason)


@app.command("delete")
def delete(
    ctx: typer.Context,
    name: NameArgument,
    reason: ReasonOption = None,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Delete a schedule; the jobs it made stay."""
    inputs.check_text(name, "NAME")
    who = audit(reason)

    async def run(backend: Backend) -> ScheduleRecord:
        before = await _fetch(backend, name)
        await (await _client(backend)).delete_schedule(name, audit=who)
        return before

    before = with_backend(ctx, dsn, schema, run)
    if json:
        output.print_json(
            {
                "schedule": before.name,
                "deleted": True,
                "changed": _changed(before, None),
            }
        )
    else:
        output.info(f"schedule {before.name!r} deleted")
    if before.declared_in_code:
        output.warn(
            f"{before.name!r} is declared with @cron: a worker whose actors still declare it "
            "creates it again when it starts (remove the @cron, or disable it instead)"
        )


@app.command("run")
def run_now(
    ctx: typer.Context,
    name: NameArgument,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Fire a schedule once now (one job, by hand) and print the job's id."""
    inputs.check_text(name, "NAME")

    async def run(backend: Backend) -> JobRow:
        return await (await _client(backend)).run_schedule(name)

    job = with_backend(ctx, dsn, schema, run)
    if json:
        output.print_json({"schedule": name, "created": 1, "job": job_summary(job)})
        return
    output.info(str(job.id))
