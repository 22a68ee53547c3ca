"""TaskqSettings: every ``TASKQ_*`` variable, read from the environment and ``.env``.

Construct through ``TaskqSettings.load(...)``: keyword overrides (CLI flags) win over the
environment, which wins over ``.env``. Any malformed value or violated startup invariant is
raised as one ConfigError line naming the variable.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal, Self

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from taskq_core.constants import DEFAULT_DSN, DEFAULT_QUEUE, DEFAULT_SCHEMA, validate_identifier
from taskq_core.durations import parse_duration
from taskq_core.errors import ConfigError, InvalidIdentifierError

ENV_PREFIX = "TASKQ_"


def _seconds(value: Any) -> float:
    if isinstance(value, str | int | float | timedelta) and not isinstance(value, bool):
        return parse_duration(value).total_seconds()
    raise ValueError(f"invalid duration {value!r}")


def _duration(value: Any) -> timedelta:
    if value is None:
        raise ValueError("a duration is required")
    return parse_duration(value)


def _optional_seconds(value: Any) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return _seconds(value)


Seconds = Annotated[float, BeforeValidator(_seconds)]
OptionalSeconds = Annotated[float | None, BeforeValidator(_optional_seconds)]
Duration = Annotated[timedelta, BeforeValidator(_duration)]


def validate_dsn(value: str) -> str:
    """Accept ``embedded``, ``embedded:PATH`` or a ``postgres(ql)://`` URL; raise ValueError."""
    text = value.strip()
    if text == "embedded" or (text.startswith("embedded:") and len(text) > len("embedded:")):
        return text
    if text.startswith(("postgresql://", "postgres://")):
        return text
    raise ValueError(
        f"invalid DSN {value!r}: expected postgresql://user:pass@host:port/db, "
        "'embedded' or 'embedded:PATH'"
    )


class TaskqSettings(BaseSettings):
    """Settings of every TaskQ process (worker, client, CLI); see the worker guide's table."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", extra="ignore", validate_default=True
    )

    # Connection and identity
    pg_dsn: str = DEFAULT_DSN
    pg_dsn_direct: str | None = None
    pg_dsn_pooled: str | None = None
    schema_name: str = DEFAULT_SCHEMA
    redis_url: str | None = None
    environment: str | None = None
    admin_host: str = "0.0.0.0"
    admin_port: int = Field(default=8080, ge=1, le=65535)
    admin_url: str = "http://localhost:8080"

    # Pools and concurrency
    dispatcher_pool_size: int = Field(default=4, ge=1)
    heartbeat_pool_size: int = Field(default=4, ge=1)
    max_concurrency: int = Field(default=8, ge=1, le=10_000)
    # Jobs claimed ahead of free consumers (None: 4 x max_concurrency, at least 16), so a
    # consumer never waits for a dispatch round trip and claims come in large batches.
    prefetch: int | None = Field(default=None, ge=0, le=10_000)
    # The most successes one flush writes: bigger flushes hold their row locks longer.
    completion_batch_max: int = Field(default=200, ge=1, le=10_000)
    pool_max_inactive_lifetime: Seconds = 300.0
    dispatch_oversample: int = Field(default=2, ge=1)
    dispatch_scope_by_home_queue: bool = False
    dispatcher_command_timeout: Seconds = 5.0

    # Liveness
    heartbeat_interval: Seconds = Field(default=10.0, gt=0)
    lock_lease: Seconds = Field(default=60.0, gt=0)
    max_heartbeat_failures: int = Field(default=3, ge=1)
    termination_grace_period: Seconds = Field(default=75.0, gt=0)
    cancellation_grace_period: Seconds = Field(default=30.0, ge=0)
    cleanup_grace_period: Seconds = Field(default=10.0, ge=0)
    max_retry_backoff: Duration = timedelta(hours=24)
    reclaim_event_visibility_delay: Seconds = 2.0

    # Leader cadences
    sweep_interval: Seconds = Field(default=30.0, gt=0)
    scheduled_wake_interval: Seconds = Field(default=1.0, gt=0)

    # Rate limiting
    rate_limit_pg_fallback_enabled: bool = True

    # Health server
    health_enabled: bool = True
    # None: one socket per process, <runtime dir>/worker-<pid>.sock (worker.health.runtime_dir)
    health_socket_path: str | None = None
    health_pg_ping_timeout: Seconds = 0.2
    health_tasks_enabled: bool = False

    # Dispatch wake-up
    poll_interval: Seconds = Field(default=1.0, gt=0)
    notify_enabled: bool = True
    notify_poll_interval: Seconds = Field(default=5.0, gt=0)
    notify_health_check_interval: Seconds = Field(default=5.0, gt=0)
    notify_reconnect_backoff_initial: Seconds = Field(default=1.0, gt=0)

    # Worker identity
    queues: Annotated[list[str], NoDecode] = [DEFAULT_QUEUE]
    worker_label: str | None = None
    workgroup_instance: str | None = None

    # Observability
    otel_enabled: bool = True
    worker_group: str = "default"
    log_format: Literal["json", "console"] = "json"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"

    # Actor config
    force_update_actor_config: bool = False

    # Prune and archive
    prune_schedule_utc: str = "03:00"
    prune_cron_expr: str | None = None
    prune_batch_size: int = Field(default=10_000, ge=1)
    prune_retention_period: Duration = timedelta(days=30)
    prune_retention_succeeded: Duration = timedelta(days=30)
    prune_retention_failed: Duration = timedelta(days=90)
    prune_retention_cancelled: Duration = timedelta(days=30)
    prune_retention_abandoned: Duration = timedelta(days=90)
    archive_retention_period: Duration = timedelta(days=365)
    archive_expiry_schedule_utc: str = "04:00"
    archive_expiry_cron_expr: str | None = None

    # Until-idle
    idle_settle_window: Seconds = Field(default=2.0, ge=0)
    idle_poll_interval: Seconds = Field(default=1.0, gt=0)
    idle_max_runtime: OptionalSeconds = None

    # Watchdog
    watchdog_enabled: bool = True
    watchdog_loop_lag_budget: Seconds = Field(default=30.0, gt=0)
    watchdog_loop_lag_startup_grace: Seconds = Field(default=30.0, ge=0)
    watchdog_tick_grace_factor: float = Field(default=5.0, ge=1.0)
    watchdog_stale_floor: Seconds = Field(default=10.0, gt=0)
    watchdog_dump_interval: Seconds = Field(default=5.0, gt=0)
    watchdog_dump_after_fraction: float = Field(default=0.5, ge=0.0, le=1.0)
    watchdog_check_interval: Seconds = Field(default=1.0, gt=0)

    @field_validator("pg_dsn")
    @classmethod
    def _check_dsn(cls, value: str) -> str:
        return validate_dsn(value)

    @field_validator("pg_dsn_direct", "pg_dsn_pooled")
    @classmethod
    def _check_optional_dsn(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return validate_dsn(value)

    @field_validator("schema_name")
    @classmethod
    def _check_schema(cls, value: str) -> str:
        try:
            return validate_identifier(value)
        except InvalidIdentifierError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("queues", mode="before")
    @classmethod
    def _split_queues(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("prune_schedule_utc", "archive_expiry_schedule_utc")
    @classmethod
    def _check_hhmm(cls, value: str) -> str:
        hours, _, minutes = value.partition(":")
        if not (hours.isdigit() and minutes.isdigit() and int(hours) < 24 and int(minutes) < 60):
            raise ValueError(f"expected HH:MM in UTC, got {value!r}")
        return value

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
        """Read the environment and ``.env``; ``overrides`` (non-None values) win over both."""
        given = {key: value for key, value in overrides.items() if value is not None}
        try:
            return cls(**given)
        except ValidationError as exc:
            raise ConfigError(describe_validation_error(exc)) from None

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
        """Jobs claimed beyond max_concurrency."""
        return max(4 * self.max_concurrency, 16) if self.prefetch is None else self.prefetch

    @property
    def lock_lease_delta(self) -> timedelta:
        """lock_lease as a timedelta, the form the backend takes."""
        return timedelta(seconds=self.lock_lease)


# Settings of the seeds' table whose subsystem is not built yet: parsed (so a deployment's
# file stays valid) but read by nothing. A worker warns at start when one of them is set.
NOT_YET_IN_EFFECT: dict[str, str] = {
    "pg_dsn_pooled": "split DSNs",
    "environment": "observability labels",
    "worker_group": "observability labels",
    "admin_host": "the admin web UI",
    "admin_port": "the admin web UI",
    "admin_url": "the admin web UI",
    "redis_url": "rate limits",
    "rate_limit_pg_fallback_enabled": "rate limits",
    "dispatch_scope_by_home_queue": "home-queue dispatch scoping",
    "reclaim_event_visibility_delay": "the reclaim feed",
    "prune_schedule_utc": "retention",
    "prune_cron_expr": "retention",
    "prune_batch_size": "retention",
    "prune_retention_period": "retention",
    "prune_retention_succeeded": "retention",
    "prune_retention_failed": "retention",
    "prune_retention_cancelled": "retention",
    "prune_retention_abandoned": "retention",
    "archive_retention_period": "retention",
    "archive_expiry_schedule_utc": "retention",
    "archive_expiry_cron_expr": "retention",
}


def settings_not_in_effect(settings: TaskqSettings) -> dict[str, str]:
    """The TASKQ_* variables set for this process that nothing reads yet, with the
    subsystem each waits for."""
    return {
        ENV_PREFIX + name.upper(): NOT_YET_IN_EFFECT[name]
        for name in sorted(settings.model_fields_set)
        if name in NOT_YET_IN_EFFECT
    }


def describe_validation_error(exc: ValidationError) -> str:
    """Render the first pydantic error as one line naming the TASKQ_* variable."""
    error = exc.errors()[0]
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    loc = [str(part) for part in error.get("loc", ()) if isinstance(part, str)]
    if not loc:
        return f"invalid settings: {message}"
    variable = ENV_PREFIX + loc[0].upper()
    value = error.get("input")
    shown = f" (got {value!r})" if isinstance(value, str | int | float) else ""
    return f"invalid setting {variable}{shown}: {message}"
