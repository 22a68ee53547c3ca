"""TaskqSettings: every ``TASKQ_*`` variable, read from the environment and ``.env``.

Construct through ``TaskqSettings.load(...)``: keyword overrides (CLI flags) win over the
environment, which wins over ``.env``. Any malformed value or violated startup invariant is
raised as one ConfigError line naming the variable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Annotated, Any, Literal, Self
from uuid import UUID

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from taskq_core.constants import (
    DEFAULT_DSN,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_POISON_RECLAIMS,
    DEFAULT_QUEUE,
    DEFAULT_SCHEMA,
    MAX_JSONB_BYTES,
    validate_identifier,
)
from taskq_core.credentials import shown_rejected, without_value
from taskq_core.cron_timing import check_cron_expression, parse_daily_time
from taskq_core.dsn import check_dsn, check_redis_url
from taskq_core.errors import ConfigError, InvalidIdentifierError
from taskq_core.setting_types import Duration, OptionalSeconds, Seconds

ENV_PREFIX = "TASKQ_"


def validate_dsn(value: str) -> str:
    """Accept ``embedded``, ``embedded:PATH`` or a ``postgres(ql)://`` URL asyncpg reads as
    written; raise ValueError saying what is wrong, never repeating the value (see dsn.py)."""
    return check_dsn(value)


def _unless_blank(value: str | None, check: Callable[[str], str]) -> str | None:
    """None for an unset or blank optional setting; else ``value`` as ``check`` returns it."""
    if value is None or not value.strip():
        return None
    return check(value)


# Retentions of the prune and of the archive (its expiry): each must be positive.
_RETENTION_FIELDS = (
    "prune_retention_period",
    "prune_retention_succeeded",
    "prune_retention_failed",
    "prune_retention_cancelled",
    "prune_retention_abandoned",
    "archive_retention_period",
)
_POSITIVE = "must be a positive duration such as 30d"


class TaskqSettings(BaseSettings):
    """Settings of every TaskQ process (worker, client, CLI); see the worker guide's table."""

    # Each field's docstring is its description (scripts/gen_settings_doc.py reads them for
    # docs/settings.md): not use_attribute_docstrings, 70 ms of every process's start.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        extra="ignore",
        validate_default=True,
    )

    # Connection and identity
    pg_dsn: str = DEFAULT_DSN
    """PostgreSQL to use: a ``postgresql://`` URL, ``embedded`` (the server whose data is in
    the nearest ``.taskq/pgdata`` of this directory or its parents) or ``embedded:PATH``.
    ``taskq embedded start`` and ``taskq migrate up`` create it; other commands never do."""
    pg_dsn_direct: str | None = None
    """DSN for what keeps state in its session, bypassing PgBouncer: LISTEN, the advisory
    locks (leader, sweeps, prune, migrations), the worker's dispatch and heartbeat; unset,
    TASKQ_PG_DSN. A multi-host DSN with ``target_session_attrs=read-write`` follows a
    failover."""
    pg_dsn_pooled: str | None = None
    """DSN for statements and short transactions (settle writes, enqueue, reads, the CLI);
    it may route through PgBouncer in transaction mode, so its connections keep no prepared
    statements when it differs from the direct DSN; unset, TASKQ_PG_DSN."""
    pg_dsn_replica: str | None = None
    """DSN of a streaming-replication standby for the operators' reads: the web UI, ``taskq
    top``, the fleet metrics and the read-only commands (lists, shows, explain) read there
    and say how far behind the primary it is; their writes (cancel, retry, pause) and
    everything a worker or client does stay on the primary. Unset, they read the primary.
    Connect to the standby directly (or through a PgBouncer in session mode)."""
    schema_name: str = DEFAULT_SCHEMA
    """PostgreSQL schema holding every TaskQ table (a plain identifier)."""
    redis_url: str | None = None
    """Redis holding the rate limiters' state (``redis://host:6379/0``; Lua scripts on
    Redis's clock; unset, PostgreSQL holds it; reservation slots are always in PostgreSQL),
    and carrying every progress report of a running job to live readers."""
    environment: str | None = None
    """Deployment environment label (``prod``, ``staging``) on telemetry."""
    admin_host: str = "127.0.0.1"
    """Bind address of the admin web UI (``taskq ui serve``); an address other than loopback
    needs TASKQ_ADMIN_TOKEN."""
    admin_port: int = Field(default=8080, ge=1, le=65535)
    """Bind port of the admin web UI."""
    admin_url: str = "http://localhost:8080"
    """Public base URL of the admin web UI: trusted by its Host and Origin checks, and
    ``taskq jobs show`` prints a job's link under it when set."""
    admin_token: str | None = None
    """Token every request to the admin web UI must carry (an ``Authorization: Bearer``
    header, or the cookie its login form sets); required to bind beyond loopback."""

    # Pools and concurrency
    dispatcher_pool_size: int = Field(default=4, ge=1)
    """Connections of the worker's dispatch pool (claims never queue behind job writes)."""
    heartbeat_pool_size: int = Field(default=4, ge=1)
    """Connections of the worker's heartbeat pool (lease renewals never queue behind jobs)."""
    max_concurrency: int = Field(default=8, ge=1, le=10_000)
    """Jobs one worker runs at once; its general pool holds 1.5 x this many connections."""
    prefetch: int | None = Field(default=None, ge=0, le=10_000)
    """Jobs claimed ahead of free consumers, so a consumer never waits for a dispatch round
    trip and claims come in large batches; unset, what the consumers start in 50 ms at the
    recent mean body time, from a quarter of TASKQ_MAX_CONCURRENCY up to 8 x it (at least 16)."""
    completion_batch_max: int = Field(default=200, ge=1, le=10_000)
    """The most successes one flush writes: bigger flushes hold their row locks longer."""
    pool_max_inactive_lifetime: Seconds = 300.0
    """An idle pool connection is closed after this long."""
    dispatch_oversample: int = Field(default=2, ge=1)
    """Candidates the dispatch query reads per free slot of an actor, absorbing identity-key
    collisions and competing workers; 1 suits one worker without identity keys."""
    dispatcher_command_timeout: Seconds = 5.0
    """A worker's statement running longer is cancelled and handled as a database outage
    (a hung connection, a partition)."""

    # Liveness
    heartbeat_interval: Seconds = Field(default=10.0, gt=0)
    """How often a worker renews its row and the leases of the jobs it holds."""
    lock_lease: Seconds = Field(default=60.0, gt=0)
    """How long a job's lease lasts without renewal before the leader may reclaim it, and
    the maintenance leader's own lease (a leader silent that long loses leadership); at
    least 4 x TASKQ_HEARTBEAT_INTERVAL."""
    max_heartbeat_failures: int = Field(default=3, ge=1)
    """Failed heartbeats in a row a worker tolerates; one more and it gives up its jobs."""
    termination_grace_period: Seconds = Field(default=75.0, gt=0)
    """Time from the first shutdown signal to a forced exit; must exceed the cancellation
    and cleanup grace periods together by more than 5s."""
    cancellation_grace_period: Seconds = Field(default=30.0, ge=0)
    """Time a cancelled (or shutting-down) job has to stop cooperatively before it is forced;
    with the cleanup grace, less than TASKQ_LOCK_LEASE."""
    cleanup_grace_period: Seconds = Field(default=10.0, ge=0)
    """Time a forced job has to clean up before it is abandoned."""
    max_retry_backoff: Duration = timedelta(hours=24)
    """Ceiling on any retry delay, whatever an actor's RetryPolicy asks for."""
    reclaim_event_visibility_delay: Seconds = Field(default=2.0, ge=0)
    """How old a reclaim event must be before the reclaim feed (``watch_reclaims``, ``taskq
    jobs reclaims``) shows it, so an event of a transaction still committing is never
    skipped; raise it when sweep transactions run long."""
    poison_reclaims: int = Field(default=DEFAULT_POISON_RECLAIMS, ge=0)
    """A job whose worker died while running it this many times (since it was last retried
    by an operator) is failed as a poison job (error class PoisonJob) instead of being handed
    to another worker; 0 turns this off."""

    # Leader cadences
    sweep_interval: Seconds = Field(default=30.0, gt=0)
    """How often the leader reclaims expired leases, fails missed deadlines and expires results."""
    scheduled_wake_interval: Seconds = Field(default=1.0, gt=0)
    """The longest the leader waits between two promotions (sooner when a job is due)."""
    jobs_vacuum_enabled: bool = True
    """The leader vacuums the jobs table itself when dead rows pile up between autovacuum's
    visits (a busy queue: each claim leaves a dead entry every dispatch walks until a vacuum
    removes it); off leaves the table to autovacuum alone."""

    # Rate limiting
    rate_limit_pg_fallback_enabled: bool = True
    """While Redis errors, rate limits are kept in PostgreSQL (Redis is asked again every
    5s); off, a job whose limit cannot be checked waits 5s and is tried again."""

    # Health server
    health_enabled: bool = True
    """Serve /live, /ready and /metrics on a Unix socket (``taskq health`` reads it)."""
    health_socket_path: str | None = None
    """The health socket's path; unset, one per process:
    ``$XDG_RUNTIME_DIR/taskq/worker-<pid>.sock``, else ``/tmp/taskq-<uid>/worker-<pid>.sock``."""
    health_pg_ping_timeout: Seconds = 0.2
    """How long /ready waits for its PostgreSQL ping."""
    health_tasks_enabled: bool = False
    """Also serve /tasks: every asyncio task's stack, as JSON."""
    health_port: int | None = Field(default=None, ge=1, le=65535)
    """Also serve /live, /ready and /metrics over TCP on this port (Kubernetes HTTP probes,
    Prometheus scrapes); unset, the Unix socket only."""
    health_host: str = "127.0.0.1"
    """Address the TCP health port binds (TASKQ_HEALTH_PORT): loopback, so only this
    machine reaches the unauthenticated endpoints; a pod whose kubelet probes it over
    ``httpGet`` sets ``0.0.0.0`` (or its pod IP)."""

    # Dispatch wake-up
    poll_interval: Seconds = Field(default=1.0, gt=0)
    """How often the producer looks for work when TASKQ_NOTIFY_ENABLED is false."""
    notify_enabled: bool = True
    """Rely on LISTEN/NOTIFY wake-ups and poll only every TASKQ_NOTIFY_POLL_INTERVAL;
    false: poll every TASKQ_POLL_INTERVAL."""
    notify_poll_interval: Seconds = Field(default=5.0, gt=0)
    """The producer's fallback poll while NOTIFY wake-ups are on."""
    notify_health_check_interval: Seconds = Field(default=5.0, gt=0)
    """How often the LISTEN connection is probed."""
    notify_reconnect_backoff_initial: Seconds = Field(default=1.0, gt=0)
    """First wait before reconnecting a lost LISTEN connection (doubling, at most 30s)."""

    # Worker identity
    queues: Annotated[list[str], NoDecode] = [DEFAULT_QUEUE]
    """Queues this worker consumes, comma-separated (``--queues`` repeated wins)."""
    worker_label: str | None = None
    """A human-readable label for this worker, shown by ``taskq workers list``."""
    workgroup_instance: str | None = None
    """Set by ``taskq workgroup start`` for its children: the supervisor they belong to (a
    child also exits when its supervisor is gone)."""
    workgroup_queues: Annotated[list[str] | None, NoDecode] = None
    """Set by ``taskq workgroup start`` for its children: every queue the group consumes, so a
    child warns of actors on unconsumed queues only when the whole group leaves them so."""
    worker_id: UUID | None = None
    """Set by ``taskq workgroup start`` for each child: the id its ``workers`` row has (the
    supervisor marks that row stopped with the exit it sees); unset: a new UUIDv7."""

    # Observability
    otel_enabled: bool = True
    """Record OpenTelemetry spans and metrics (when an SDK provider is installed)."""
    worker_group: str = "default"
    """Consumer group name on CONSUMER spans."""
    log_format: Literal["json", "console"] | None = None
    """Log records as JSON lines or as console text; unset: console text when stderr is a
    terminal, JSON lines otherwise. Lines an actor writes (structlog or ``logging``) carry
    the job's ``job_id``, ``actor``, ``queue``, ``attempt`` and ``trace_id``."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    """The lowest level logged (SIGHUP re-reads it)."""
    progress_flush_interval: Seconds = Field(default=1.0, gt=0)
    """How often a running job's reported progress is written to PostgreSQL at most (its
    last report always is); Redis subscribers (TASKQ_REDIS_URL) see every report."""

    # Actor config
    force_update_actor_config: bool = False
    """At worker start, overwrite drifted stored actor config with the code's instead of
    refusing to start."""

    # Sizes
    max_payload_bytes: int = Field(default=DEFAULT_MAX_PAYLOAD_BYTES, ge=1, le=MAX_JSONB_BYTES)
    """The largest payload a job may have, in bytes of its JSON text: an enqueue over it (one
    job, a batch, the COPY path, ``taskq enqueue``, a batch's finalizer, a cron schedule's
    payload) is refused with PayloadTooLargeError, naming both sizes. Set it where jobs are
    enqueued (the application, the CLI) and in the workers. The default, 1 MiB, keeps a
    small database safe: a large document belongs in object storage, the job carrying its
    key."""
    max_result_bytes: int = Field(default=DEFAULT_MAX_RESULT_BYTES, ge=1, le=MAX_JSONB_BYTES)
    """The largest result an actor may return, in bytes of its JSON text: a larger one
    fails the job for good (error class UnstorableResult) instead of being stored. Read by
    the workers."""

    # Prune and archive
    prune_schedule_utc: str = "03:00"
    """Daily time (HH:MM, UTC) of the prune that moves old terminal jobs to the archive;
    ignored when TASKQ_PRUNE_CRON_EXPR is set."""
    prune_cron_expr: str | None = None
    """A 5-field cron expression (read in UTC) for the prune instead of
    TASKQ_PRUNE_SCHEDULE_UTC."""
    prune_batch_size: int = Field(default=10_000, ge=1)
    """Jobs one prune batch (one transaction) moves; the archive expiry deletes in batches
    of this size too."""
    prune_retention_period: Duration = timedelta(days=30)
    """How long a terminal job stays in the jobs table after it finished before the prune
    archives it, for every status whose own retention setting is unset."""
    prune_retention_succeeded: Duration = timedelta(days=30)
    """Retention of succeeded jobs (unset: TASKQ_PRUNE_RETENTION_PERIOD when that is set)."""
    prune_retention_failed: Duration = timedelta(days=90)
    """Retention of failed jobs (unset: TASKQ_PRUNE_RETENTION_PERIOD when that is set)."""
    prune_retention_cancelled: Duration = timedelta(days=30)
    """Retention of cancelled jobs (unset: TASKQ_PRUNE_RETENTION_PERIOD when that is set)."""
    prune_retention_abandoned: Duration = timedelta(days=90)
    """Retention of abandoned and crashed jobs (unset: TASKQ_PRUNE_RETENTION_PERIOD when
    that is set)."""
    archive_retention_period: Duration = timedelta(days=365)
    """How long an archived job is read back (its ``expire_at``); the archive expiry drops it
    with its partition's range of days, at most that range's width later (a day up to 30
    days, a thirtieth of this beyond)."""
    archive_expiry_schedule_utc: str = "04:00"
    """Daily time (HH:MM, UTC) of the archive expiry; ignored when
    TASKQ_ARCHIVE_EXPIRY_CRON_EXPR is set."""
    archive_expiry_cron_expr: str | None = None
    """A 5-field cron expression (read in UTC) for the archive expiry instead of
    TASKQ_ARCHIVE_EXPIRY_SCHEDULE_UTC."""

    # Until-idle
    idle_settle_window: Seconds = Field(default=2.0, ge=0)
    """``--until-idle``: how long the queues must stay empty before the worker calls them
    drained."""
    idle_poll_interval: Seconds = Field(default=1.0, gt=0)
    """``--until-idle``: how often the drain monitor checks the queues."""
    idle_max_runtime: OptionalSeconds = None
    """``--until-idle``: the longest a drain may take; past it the worker exits with code 4.
    Unset: no limit."""

    # Watchdog
    watchdog_enabled: bool = True
    """Run the watchdog: a hung shutdown, a stalled loop or a blocked event loop ends the
    process with exit code 2 so its supervisor restarts it."""
    watchdog_loop_lag_budget: Seconds = Field(default=30.0, gt=0)
    """How long the event loop may be blocked before the watchdog trips."""
    watchdog_loop_lag_startup_grace: Seconds = Field(default=30.0, ge=0)
    """Time after start before the loop-lag detector arms (unless a loop ticks sooner)."""
    watchdog_tick_grace_factor: float = Field(default=5.0, ge=1.0)
    """A loop is stale after this many of its periods without a tick (at least
    TASKQ_WATCHDOG_STALE_FLOOR)."""
    watchdog_stale_floor: Seconds = Field(default=10.0, gt=0)
    """The shortest time without a tick that counts a loop as stale."""
    watchdog_dump_interval: Seconds = Field(default=5.0, gt=0)
    """During a slow shutdown, how often the still-running tasks are logged."""
    watchdog_dump_after_fraction: float = Field(default=0.5, ge=0.0, le=1.0)
    """The share of TASKQ_TERMINATION_GRACE_PERIOD a shutdown uses before those logs start."""
    watchdog_check_interval: Seconds = Field(default=1.0, gt=0)
    """How often the loop-lag and stale-loop detectors check."""

    @field_validator("pg_dsn")
    @classmethod
    def _check_dsn(cls, value: str) -> str:
        return validate_dsn(value)

    @field_validator("pg_dsn_direct", "pg_dsn_pooled", "pg_dsn_replica")
    @classmethod
    def _check_optional_dsn(cls, value: str | None) -> str | None:
        return _unless_blank(value, validate_dsn)

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        return _unless_blank(value, check_redis_url)

    @field_validator("schema_name")
    @classmethod
    def _check_schema(cls, value: str) -> str:
        try:
            return validate_identifier(value)
        except InvalidIdentifierError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("queues", "workgroup_queues", mode="before")
    @classmethod
    def _split_queues(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("prune_schedule_utc", "archive_expiry_schedule_utc")
    @classmethod
    def _check_hhmm(cls, value: str) -> str:
        parse_daily_time(value)
        return value.strip()

    @field_validator(*_RETENTION_FIELDS, mode="before")
    @classmethod
    def _refuse_negative_retention(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().startswith("-"):
            raise ValueError(_POSITIVE)
        return value

    @field_validator(*_RETENTION_FIELDS)
    @classmethod
    def _check_retention(cls, value: timedelta) -> timedelta:
        # Zero would archive a job the moment it finishes (or delete it the moment it is
        # archived): refused by name rather than read as "at once" or "never".
        if value <= timedelta(0):
            raise ValueError(_POSITIVE)
        return value

    @field_validator("prune_cron_expr", "archive_expiry_cron_expr")
    @classmethod
    def _check_cron(cls, value: str | None) -> str | None:
        return _unless_blank(value, check_cron_expression)  # unset: the daily HH:MM time applies

    @model_validator(mode="after")
    def _check_invariants(self) -> Self:
        if self.lock_lease < 4 * self.heartbeat_interval:
            raise ValueError(
                f"TASKQ_LOCK_LEASE ({self.lock_lease:g}s) must be >= 4 x "
                f"TASKQ_HEARTBEAT_INTERVAL ({self.heartbeat_interval:g}s)"
            )
        graces = self.cancellation_grace_period + self.cleanup_grace_period
        if graces >= self.termination_grace_period - 5.0:
            raise ValueError(
                f"TASKQ_CANCELLATION_GRACE_PERIOD + TASKQ_CLEANUP_GRACE_PERIOD ({graces:g}s) must "
                f"be < TASKQ_TERMINATION_GRACE_PERIOD - 5 ({self.termination_grace_period - 5:g}s)"
            )
        if graces >= self.lock_lease:
            raise ValueError(
                f"TASKQ_CANCELLATION_GRACE_PERIOD + TASKQ_CLEANUP_GRACE_PERIOD ({graces:g}s) must "
                f"be < TASKQ_LOCK_LEASE ({self.lock_lease:g}s)"
            )
        return self

    @classmethod
    def load(cls, **overrides: Any) -> TaskqSettings:
        """Read the environment and ``.env``; ``overrides`` (non-None values) win over both.

        A ``pg_dsn`` given here (``--dsn``, a client's DSN) that names another database than
        the environment's TASKQ_PG_DSN also wins over the environment's TASKQ_PG_DSN_DIRECT,
        TASKQ_PG_DSN_POOLED and TASKQ_PG_DSN_REPLICA, which belong to that other database.
        """
        return cls.load_flagged({}, **overrides)

    @classmethod
    def load_flagged(cls, flags: Mapping[str, str], **overrides: Any) -> TaskqSettings:
        """``load``, with ``flags`` naming the command-line flag each override came from
        (``{"pg_dsn": "--dsn"}``): an error about such a value names the flag, not the
        variable."""
        given = {key: value for key, value in overrides.items() if value is not None}
        try:
            settings = cls(**given)
            split_names = ("pg_dsn_direct", "pg_dsn_pooled", "pg_dsn_replica")
            split = any(getattr(settings, name) is not None for name in split_names)
            if "pg_dsn" in given and split:
                environment = cls(**{k: v for k, v in given.items() if k != "pg_dsn"})
                if environment.pg_dsn != settings.pg_dsn:
                    update = {name: None for name in split_names if name not in given}
                    return settings.model_copy(update=update)
            return settings
        except ValidationError as exc:
            named = {field: flag for field, flag in flags.items() if field in given}
            raise ConfigError(describe_validation_error(exc, named)) from None

    @property
    def direct_dsn(self) -> str:
        """DSN for session-scoped work (LISTEN, advisory locks, dispatch)."""
        return self.pg_dsn_direct or self.pg_dsn

    @property
    def pooled_dsn(self) -> str:
        """DSN for short transactions; may route through PgBouncer in transaction mode."""
        return self.pg_dsn_pooled or self.pg_dsn

    @property
    def worker_pool_size(self) -> int:
        """Connections for terminal writes: headroom over max_concurrency for slot recycling."""
        return max(2, int(self.max_concurrency * 1.5))

    @property
    def effective_prefetch(self) -> int:
        """The most jobs claimed beyond max_concurrency (the worker's pace sets how many
        when TASKQ_PREFETCH is unset: worker/pace.py)."""
        return max(8 * self.max_concurrency, 16) if self.prefetch is None else self.prefetch

    @property
    def lock_lease_delta(self) -> timedelta:
        """lock_lease as a timedelta, the form the backend takes."""
        return timedelta(seconds=self.lock_lease)


# Settings whose subsystem is not built yet, each with that subsystem: parsed (so a
# deployment's file stays valid) but read by nothing. A worker warns at start when one of
# them is set, and docs/settings.md marks them. None today.
NOT_YET_IN_EFFECT: dict[str, str] = {}


def settings_not_in_effect(settings: TaskqSettings) -> dict[str, str]:
    """The TASKQ_* variables set for this process that nothing reads yet, with the
    subsystem each waits for."""
    return {
        ENV_PREFIX + name.upper(): NOT_YET_IN_EFFECT[name]
        for name in sorted(settings.model_fields_set)
        if name in NOT_YET_IN_EFFECT
    }


def describe_validation_error(exc: ValidationError, flags: Mapping[str, str] | None = None) -> str:
    """Render the first pydantic error as one line naming the TASKQ_* variable, or the flag
    the value came from (``flags``: field -> flag).

    The rejected value is quoted only when its setting cannot hold a credential (masked and
    bounded even then); a DSN, a Redis URL or a token is described by the reason alone.
    """
    error = exc.errors()[0]
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    loc = [str(part) for part in error.get("loc", ()) if isinstance(part, str)]
    if not loc:
        return f"invalid settings: {message}"
    flag = (flags or {}).get(loc[0])
    variable = f"value of {flag}" if flag else f"setting {ENV_PREFIX}{loc[0].upper()}"
    value = error.get("input")
    shown = shown_rejected(loc[0], value)
    message = without_value(message, loc[0], value)  # a validator may quote it
    return f"invalid {variable}{f' (got {shown})' if shown else ''}: {message}"
