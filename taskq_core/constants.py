"""Names shared by every process: identifier guard, NOTIFY channels, lock keys and exit codes.

Anything that two processes must spell the same way lives here, so a worker, the CLI and an
external script can never disagree on a channel or an advisory-lock key.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

from taskq_core.errors import InvalidIdentifierError

IDENT_RE: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# PostgreSQL truncates identifiers past 63 bytes; channel names add a prefix, so keep headroom.
MAX_SCHEMA_LENGTH: Final = 40

DEFAULT_SCHEMA: Final = "taskq"
DEFAULT_QUEUE: Final = "default"
DEFAULT_DSN: Final = "postgresql://taskq:taskq@localhost:5432/taskq"

# Exit codes; they and the intervals and limits further down are alike by shape only (named
# Final values, each its own).
EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_WATCHDOG: Final = 2
EXIT_IDLE_FAILURES: Final = 3
EXIT_IDLE_MAX_RUNTIME: Final = 4

MIGRATE_LOCK_PREFIX: Final = "taskq:migrate:"
LEADER_LOCK_PREFIX: Final = "taskq:maintenance_leader:"
PRUNE_LOCK_PREFIX: Final = "taskq:prune:"

# The cluster-wide locks (RetentionBackend.sweep_lock) that keep a second prune or archive
# expiry from running at once: a rolling deploy's two leaders, or an operator's `taskq prune`.
PRUNE_LOCK: Final = "taskq:prune"
ARCHIVE_EXPIRY_LOCK: Final = "taskq:archive_expiry"

# A workers row silent this long (at least; see worker/sweeps/stale_workers.py) is deleted by
# the leader.
STALE_WORKER_RETENTION: Final = timedelta(hours=24)
# The leader's own vacuum of the jobs table (TASKQ_JOBS_VACUUM_ENABLED): looked at every
# JOBS_VACUUM_CHECK_INTERVAL seconds, run once this many dead row versions and this share of
# the rows are dead (as migration 0004's autovacuum trigger), bounded by the timeout.
JOBS_VACUUM_CHECK_INTERVAL: Final = 10.0
JOBS_VACUUM_MIN_DEAD: Final = 10_000
JOBS_VACUUM_DEAD_FRACTION: Final = 0.01
JOBS_VACUUM_TIMEOUT: Final = 600.0

# The worker's youngest-generation threshold of the garbage collector (the default is 700: a
# busy worker collected every few jobs). See worker/collector.py.
GC_YOUNG_THRESHOLD: Final = 10_000

# The leader's cron loop (worker/cron_loop.py): fires due schedules every CRON_TICK_INTERVAL
# seconds, at most CRON_TICK_LIMIT per transaction, again at once while a tick is full.
CRON_TICK_INTERVAL: Final = 1.0
CRON_TICK_LIMIT: Final = 100

# How often the leader's other fixed-cadence loops run (worker/leader_services.py declares
# which loop uses which; TASKQ_SWEEP_INTERVAL and TASKQ_SCHEDULED_WAKE_INTERVAL are settings):
# the stranded-queue check, the stale-worker cleanup, and the idle limiter state sweep (each
# look reads the limiter tables whole). The queue-depth sample's is LEADER_SAMPLE_INTERVAL in
# worker/leader_sample.py.
STRANDED_CHECK_INTERVAL: Final = 60.0
STALE_WORKER_CHECK_INTERVAL: Final = 300.0
LIMITER_STATE_SWEEP_EVERY: Final = 300.0

RECLAIM_EVENT_VISIBILITY_DELAY_SECONDS: Final = 2.0

# How many times a claimed job may be reclaimed before its body's start was recorded and
# still not use an attempt: past this it counts as started (a job that kills its worker at
# once would otherwise come back forever).
UNSTARTED_RECLAIM_LIMIT: Final = 10

# A job a rate limit held back is due again at the next multiple of this, on the database's
# clock, instead of at its own microsecond: a limit's line (a job every 10 ms at 100/s) then
# comes due in steps the leader promotes together, not one promotion pass and one wake of
# every worker per job (docs/performance.md, "Rate limits"). Its place in the line moves by
# less than this; a job that waits for its own time is never rounded.
DENIAL_GRID: Final = timedelta(milliseconds=50)

# A job whose worker died while running it (its lease expired with its body started) this
# many times is failed by the reclaim (error_class POISON_JOB_ERROR) instead of being handed
# to another worker: one bad payload must not take down a fleet in a loop. The setting is
# TASKQ_POISON_RECLAIMS; 0 turns the rule off.
DEFAULT_POISON_RECLAIMS: Final = 3
POISON_JOB_ERROR: Final = "PoisonJob"

# The largest payload and result (JSON text, in bytes) a job may carry unless
# TASKQ_MAX_PAYLOAD_BYTES / TASKQ_MAX_RESULT_BYTES say otherwise: enough for any document a
# job should carry (a large one belongs in object storage, the job holding its key), small
# enough that a list or an accident never drags megabytes through a small database.
DEFAULT_MAX_PAYLOAD_BYTES: Final = 1024 * 1024
DEFAULT_MAX_RESULT_BYTES: Final = 1024 * 1024
# The largest jsonb PostgreSQL stores (its offset field holds 28 bits): the settings' ceiling.
MAX_JSONB_BYTES: Final = (1 << 28) - 1

# A running job asked to cancel is reclaimed only after its lease, both cancel graces and this
# headroom have passed, so a merely slow cancellation is never mistaken for a crash. Both
# backends and ``taskq jobs explain`` read it; the SQL gets it as a parameter.
CANCEL_RECLAIM_HEADROOM: Final = timedelta(seconds=60)


def validate_identifier(name: str, *, what: str = "schema name") -> str:
    """Return ``name`` if it is a plain SQL identifier, else raise InvalidIdentifierError.

    asyncpg cannot bind identifiers, so this guard runs before every interpolation.
    """
    if not isinstance(name, str) or not IDENT_RE.fullmatch(name):
        raise InvalidIdentifierError(
            f"invalid {what} {name!r}: use letters, digits and underscores, "
            "not starting with a digit"
        )
    if len(name) > MAX_SCHEMA_LENGTH:
        raise InvalidIdentifierError(
            f"invalid {what} {name!r}: at most {MAX_SCHEMA_LENGTH} characters"
        )
    return name


def wake_channel(schema: str) -> str:
    """Channel that carries 'new dispatchable work' for one schema."""
    return f"taskq_wake_{validate_identifier(schema)}"


def events_channel(schema: str) -> str:
    """Channel that carries JSON events (cancel requests) for one schema."""
    return f"taskq_events_{validate_identifier(schema)}"


def migrate_lock_key(schema: str) -> str:
    """Advisory-lock name that serializes `migrate up` per schema."""
    return MIGRATE_LOCK_PREFIX + validate_identifier(schema)


def leader_lock_key(schema: str) -> str:
    """Advisory-lock name the maintenance leader holds per schema."""
    return LEADER_LOCK_PREFIX + validate_identifier(schema)
