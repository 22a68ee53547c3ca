"""The one way to open a backend: who opens it (its role) decides its pools and DSN.

The client, the worker, the supervisor's health checks and the operator commands all come
here; none of them names a driver. Only this module and ``backend/postgres/`` import the
Postgres driver package (the layering test checks it), so a second backend is one new
branch here. The driver loads on the first open, never on import: the CLI's ``--help`` and
shell completion import this module's callers without connecting. The DSN helpers and the
migration entry points the CLI needs are re-exported here for the same reason. Every backend
opened here gets the OpenTelemetry hooks (``obs.backend_hooks``): this is where telemetry
meets the driver, which itself imports nothing from ``obs``.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from taskq_core.dsn import describe_dsn, prepare_dsn

if TYPE_CHECKING:
    # Re-exported (``as``) for the CLI's annotations; the classes load with the driver.
    from taskq_core.backend.hooks import NotifyHooks
    from taskq_core.backend.postgres.migrate import MigrateResult as MigrateResult
    from taskq_core.backend.postgres.migrate import MigrationState as MigrationState
    from taskq_core.backend.protocol import Backend
    from taskq_core.settings import TaskqSettings

__all__ = [
    "Role",
    "apply_migrations",
    "describe_dsn",
    "open_backend",
    "open_health_backend",
    "prepare_dsn",
    "read_migration_status",
]

# An operator command makes a handful of sequential reads or one write.
COMMAND_POOL_SIZE = 2
# The supervisor's health checks read the workers table now and then.
HEALTH_POOL_SIZE = 2


class Role(Enum):
    """Who opens the backend."""

    CLIENT = "client"  # an application enqueuing: the driver's default pool, pooled DSN
    WORKER = "worker"  # a worker: dispatch and heartbeat pools of their own, sized by settings
    COMMAND = "command"  # one operator command: a small pool, closed when the command ends
    READER = "reader"  # an operator's reads (dashboards, fleet metrics, lists): the replica


async def open_backend(
    settings: TaskqSettings, role: Role, *, direct: bool = False, max_size: int | None = None
) -> Backend:
    """A backend on the configured DSN and schema, sized for ``role``.

    ``direct`` (COMMAND only): on TASKQ_PG_DSN_DIRECT even when a pooled DSN is set, for a
    command that holds a session advisory lock. ``max_size`` (COMMAND and READER):
    connections, for a server that answers requests concurrently. READER is COMMAND on
    TASKQ_PG_DSN_REPLICA when one is set (``get_read_staleness`` then says how far behind).
    """
    from taskq_core.backend.postgres.backend import PostgresBackend

    s = settings
    if role is Role.WORKER:
        # Settle writes and reads on the pooled DSN; LISTEN, the leader, the sweeps' locks,
        # dispatch and the heartbeat on the direct one (PgBouncer compatibility).
        return await PostgresBackend.connect(
            s.pooled_dsn,
            s.schema_name,
            direct_dsn=s.direct_dsn,
            min_size=2,
            max_size=s.worker_pool_size,
            dispatch_pool_size=s.dispatcher_pool_size,
            heartbeat_pool_size=s.heartbeat_pool_size,
            command_timeout=s.dispatcher_command_timeout,
            max_inactive_lifetime=s.pool_max_inactive_lifetime,
            dispatch_oversample=s.dispatch_oversample,
            notify_health_check_interval=s.notify_health_check_interval,
            notify_reconnect_backoff=s.notify_reconnect_backoff_initial,
            max_payload_bytes=s.max_payload_bytes,
            notify_hooks=_notify_telemetry(),
        )
    if role is Role.COMMAND or role is Role.READER:
        # A standby holds no session locks and takes no LISTEN: its DSN is its own direct
        # one (a PgBouncer in front of it must run in session mode).
        replica = s.pg_dsn_replica if role is Role.READER else None
        return await PostgresBackend.connect(
            replica or (s.direct_dsn if direct else s.pooled_dsn),
            s.schema_name,
            direct_dsn=replica or s.direct_dsn,
            min_size=1,
            max_size=COMMAND_POOL_SIZE if max_size is None else max_size,
            max_payload_bytes=s.max_payload_bytes,
            notify_hooks=_notify_telemetry(),
        )
    return await PostgresBackend.connect(
        s.pooled_dsn,
        s.schema_name,
        direct_dsn=s.direct_dsn,
        max_payload_bytes=s.max_payload_bytes,
        notify_hooks=_notify_telemetry(),
    )


async def open_health_backend(dsn: str, schema: str, *, min_size: int = 1) -> Backend:
    """The supervisor's small backend for the ``workers`` table (worker health, children's
    exits). It takes the DSN and schema of the workgroup's plan rather than settings: the
    supervisor loads no TASKQ_* settings. ``min_size=0`` connects at first use only."""
    from taskq_core.backend.postgres.backend import PostgresBackend

    return await PostgresBackend.connect(
        dsn, schema, min_size=min_size, max_size=HEALTH_POOL_SIZE, notify_hooks=_notify_telemetry()
    )


def _notify_telemetry() -> NotifyHooks:
    """The OpenTelemetry hooks every backend opened here reports its LISTEN connection to
    (the driver imports no ``obs``; see ``backend.hooks``)."""
    from taskq_core.obs.backend_hooks import NotifyMetrics

    return NotifyMetrics()


async def apply_migrations(dsn: str, schema: str) -> MigrateResult:
    """Apply the pending migrations to ``schema`` over one connection of its own."""
    from taskq_core.backend.postgres.connection import connect
    from taskq_core.backend.postgres.migrate import migrate_up

    conn = await connect(dsn)
    try:
        return await migrate_up(conn, schema)
    finally:
        await conn.close()


async def read_migration_status(dsn: str, schema: str) -> list[MigrationState]:
    """Every migration, applied or pending, over one connection of its own."""
    from taskq_core.backend.postgres.connection import connect
    from taskq_core.backend.postgres.migrate import migration_status

    conn = await connect(dsn)
    try:
        return await migration_status(conn, schema)
    finally:
        await conn.close()
