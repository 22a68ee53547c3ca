"""``taskq enqueue ACTOR``: put jobs on a queue from a shell; prints the new id(s).

Enqueueing by name needs no registry: the job goes to the queue the actor registered (or
``--queue``). When no worker has ever registered the actor the job is still enqueued, with
a warning that it waits for one in the queue it took; ``taskq jobs explain`` names the
mismatch if the actor later registers on another queue. ``--actors MOD:ATTR`` validates the
payload with the actor's model first. ``--count N`` inserts N jobs in one statement: all or
none. ``--json`` prints the jobs created (id, queue, status, ...) as one document instead of
the ids; warnings stay on stderr.

``--unique-key K`` refuses the job while another with that key waits or runs; with
``--unique-for D`` at most one job with that key per window of D (aligned on the Unix epoch),
whatever its state. A refusal is one error line naming the job that holds the key and when
it is free again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, cast
from uuid import UUID

import typer

from taskq_cli import inputs, output
from taskq_cli.database import with_backend
from taskq_cli.job_documents import job_summary
from taskq_cli.options import ActorArgument, DsnOption, SchemaOption
from taskq_core.actors import ActorRef, load_registry
from taskq_core.backend.protocol import ActorConfigRow, Backend, JobRow
from taskq_core.backend.protocol.unique import check_unique
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.durations import format_duration
from taskq_core.enqueue_conflict import OnConflict, check_on_conflict
from taskq_core.enqueue_plan import unknown_actor
from taskq_core.errors import ConfigError, SingletonCollisionError, TaskqError

MAX_COUNT = 10_000


def _registered(spec: str | None, actor: str) -> list[ActorRef] | None:
    """The registry named by ``--actors`` (it must contain the actor), or None."""
    if spec is None:
        return None
    registry = load_registry(inputs.check_registry_spec(spec))
    if actor not in registry:
        known = ", ".join(sorted(registry)) or "none"
        raise ConfigError(f"--actors {spec}: has no actor {actor!r} (it has: {known})")
    return list(registry.values())


def _unique_options(
    key: str | None, window: str | None, count: int
) -> tuple[str | None, timedelta | None]:
    """--unique-key and --unique-for, checked by the backends' rules (named by their flags)."""
    inputs.optional_text(key, "--unique-key")
    width = None if window is None else inputs.parse_duration_option(window, "--unique-for")
    try:
        check_unique(key, width)
    except ValueError as exc:
        message = str(exc).replace("unique_for", "--unique-for")
        raise ConfigError(message.replace("unique_key", "--unique-key")) from None
    if key is not None and count > 1:
        raise ConfigError(
            f"--count: {count} jobs cannot share one --unique-key (all but the first would be "
            "refused); enqueue them one at a time with keys of their own"
        )
    return key, width


def _check_on_conflict(mode: str, key: str | None) -> None:
    """--on-conflict, checked as the client checks on_conflict (named by the flags)."""
    try:
        check_on_conflict(mode, key)
    except ConfigError as exc:
        message = (
            str(exc)
            .replace("on_conflict=", "--on-conflict ")
            .replace("on_conflict", "--on-conflict")
        )
        raise ConfigError(message.replace("a unique_key", "--unique-key")) from None


async def _refusal(backend: Backend, error: SingletonCollisionError) -> TaskqError:
    """The one error line for an enqueue refused by a unique key: the key, the job that holds
    it (its status, read now) and when it is free again."""
    holder = None
    if isinstance(error.existing_job_id, UUID):
        holder = await backend.get(error.existing_job_id)
    held_by = f"job {error.existing_job_id}"
    if holder is not None:
        held_by += f" ({holder.status.value})"
    if isinstance(error.retry_after, timedelta):
        hint = f"free again in {format_duration(error.retry_after)}, when its window ends"
    elif holder is not None and holder.unique_until is None:
        hint = "free again once that job ends"
    else:
        hint = f"see taskq jobs show {error.existing_job_id}"
    return TaskqError(f"--unique-key {error.unique_key!r}: held by {held_by}; {hint}")


# Option declarations here mirror other commands' and each other line for line on purpose:
# typer reads each command's options from its own signature (options.py holds the shared ones).
def enqueue(
    ctx: typer.Context,
    actor: ActorArgument,
    payload: Annotated[
        str | None,
        typer.Option(
            "--payload", help="JSON object; @FILE reads a file, - reads stdin. Default {}."
        ),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option("--queue", help="Queue (default: the actor's registered queue)."),
    ] = None,
    delay: Annotated[
        str | None,
        typer.Option("--delay", help="Run no earlier than this from now: 30s, 5m, 2h, 7d, PT1H."),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Run no earlier than this time, instead of --delay: ISO-8601 "
            "(2026-12-24T09:00+01:00; UTC when it names no offset).",
        ),
    ] = None,
    priority: Annotated[
        int | None, typer.Option("--priority", help="Higher runs first (default 0).")
    ] = None,
    identity_key: Annotated[
        str | None,
        typer.Option("--identity-key", help="At most one job per (actor, key) runs at a time."),
    ] = None,
    fairness_key: Annotated[
        str | None,
        typer.Option("--fairness-key", help="Cohort for round_robin queues (e.g. a tenant)."),
    ] = None,
    count: Annotated[
        int, typer.Option("--count", help=f"Enqueue N identical jobs at once (1..{MAX_COUNT}).")
    ] = 1,
    unique_key: Annotated[
        str | None,
        typer.Option(
            "--unique-key",
            help="Refuse the job while another with this key waits or runs (see --unique-for).",
        ),
    ] = None,
    unique_for: Annotated[
        str | None,
        typer.Option(
            "--unique-for",
            help="With --unique-key: one job per key per window of this length, whatever its "
            "state (windows aligned on the Unix epoch): 30s, 5m, 2h, 7d, PT1H.",
        ),
    ] = None,
    on_conflict: Annotated[
        str,
        typer.Option(
            "--on-conflict",
            help="With --unique-key, when a job holds the key: raise (refuse it, exit 1), "
            "return_existing (print that job's id), replace (a waiting job takes this payload "
            "and start time; a running one is still refused).",
        ),
    ] = "raise",
    actors: Annotated[
        str | None,
        typer.Option("--actors", help="MODULE:ATTR registry: validate the payload first."),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Refuse an actor no worker has registered (for scripts)."),
    ] = False,
    json: output.ChangesJsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = None,
) -> None:
    """Enqueue jobs for ACTOR and print their ids, one per line (--json: the jobs created)."""
    inputs.check_name(actor, "ACTOR")
    document = inputs.parse_payload(payload)
    queue = inputs.optional_new_name(queue, "queue", "--queue")
    wait = None if delay is None else inputs.parse_duration_option(delay, "--delay")
    run_at = None if at is None else inputs.parse_moment(at, "--at")
    if wait is not None and run_at is not None:
        raise ConfigError("--delay and --at: give one of them")
    if priority is not None:
        inputs.check_int(priority, "--priority", minimum=inputs.INT32_MIN)
    inputs.optional_text(identity_key, "--identity-key")
    inputs.optional_text(fairness_key, "--fairness-key")
    inputs.check_int(count, "--count", minimum=1, maximum=MAX_COUNT)
    key, window = _unique_options(unique_key, unique_for, count)
    _check_on_conflict(on_conflict, key)
    registry = _registered(actors, actor)
    # Alike serving.uvicorn_config's call by shape only: keyword arguments, other data.
    item = EnqueueItem(
        actor,
        document,
        delay=wait,
        queue=queue,
        priority=priority,
        identity_key=identity_key,
        fairness_key=fairness_key,
        unique_key=key,
        unique_for=window,
        run_at=run_at,
        on_conflict=cast(OnConflict, on_conflict),
    )

    async def run(backend: Backend) -> tuple[ActorConfigRow | None, list[JobRow], str]:
        config = await backend.get_actor_config(actor)
        client = JobsClient(backend=backend, registry=registry, strict_actors=strict)
        await client.open()
        try:
            rows = await client.enqueue_batch([item] * count)
        except SingletonCollisionError as exc:
            raise await _refusal(backend, exc) from exc
        unregistered = ""
        if config is None:  # say so, with the registered names closest to it
            known = [row.actor for row in await backend.list_actor_configs()]
            unregistered = unknown_actor(actor, known)
        return config, rows, unregistered

    config, rows, unregistered = with_backend(ctx, dsn, schema, run)
    if json:
        output.print_json(
            {
                # A resolved conflict may answer with a job that was there before.
                "created": len(rows) if on_conflict == "raise" else None,
                "actor": actor,
                "queue": rows[0].queue,
                "registered_queue": None if config is None else config.queue,
                "jobs": [job_summary(row) for row in rows],
            }
        )
    else:
        for row in rows:
            output.info(str(row.id))
    if config is None:
        # The job stays in this queue even if the actor registers on another one later
        # (``jobs explain`` then names the mismatch), so say which queue it took.
        output.warn(
            f"{unregistered} yet: the job(s) wait in queue "
            f"{rows[0].queue!r} until a worker with that actor consumes it (pass --queue "
            "if the actor's workers will consume another queue; --strict refuses instead)"
        )
    elif rows[0].queue != config.queue:
        output.warn(
            f"actor {actor!r} is registered on queue {config.queue!r}; these job(s) went to "
            f"{rows[0].queue!r} and need a worker consuming that queue"
        )
