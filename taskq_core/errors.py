"""The exception hierarchy. Every error a user can cause is a TaskqError with a one-line message."""

from __future__ import annotations


class TaskqError(Exception):
    """Base of every error TaskQ raises on purpose; its message is one line meant for humans."""


class ConfigError(TaskqError):
    """A setting, DSN, file or argument is malformed or violates an invariant."""


class UnknownActorError(ConfigError):
    """An enqueue by name for an actor no worker has registered, refused because the client
    (``JobsClient(strict_actors=True)``, ``taskq enqueue --strict``) asked for that."""


class InvalidIdentifierError(ConfigError):
    """A schema (or other SQL identifier) would be unsafe to interpolate."""


class DatabaseUnavailableError(TaskqError):
    """The database is away: it could not be reached, refused the connection, is restarting
    or shutting down, or dropped the connection mid-statement. Retrying later succeeds."""


class TransientDatabaseError(TaskqError):
    """A statement failed in a way that retrying fixes (deadlock, serialization failure,
    statement timeout) while the database itself is up."""


class MigrationError(TaskqError):
    """A migration failed to apply, or the schema is not migrated."""


class SchemaNotMigratedError(MigrationError):
    """The schema or its tables do not exist: ``taskq migrate up`` has not run."""


class JobNotFoundError(TaskqError):
    """No job has the given id."""


class ScheduleNotFoundError(TaskqError):
    """No cron schedule has the given name."""


class InvalidTransitionError(TaskqError):
    """A state change the state machine does not allow."""


class PayloadValidationError(TaskqError):
    """A payload does not match the actor's model."""


class PayloadTooLargeError(TaskqError):
    """Enqueue refused: a payload's JSON text is larger than TASKQ_MAX_PAYLOAD_BYTES
    (``size`` and ``limit`` in bytes)."""

    def __init__(self, message: str, *, size: int, limit: int) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class MaxPendingExceededError(TaskqError):
    """Enqueue refused: the actor already has max_pending jobs waiting."""


class SingletonCollisionError(TaskqError):
    """Enqueue refused: a job holding the same unique key exists (``existing_job_id``).
    ``retry_after`` (a timedelta, or None while the holder is still waiting or running) is
    when its window ends: advisory, to steer the caller's next try."""

    def __init__(self, unique_key: str, existing_job_id: object, retry_after: object) -> None:
        hint = f"; free again in {retry_after}" if retry_after is not None else ""
        super().__init__(f"a job with unique key {unique_key!r} exists: {existing_job_id}{hint}")
        self.unique_key = unique_key
        self.existing_job_id = existing_job_id
        self.retry_after = retry_after


class BatchAbortedError(TaskqError):
    """The batch aborted (its failure policy's threshold was reached) and none of its children
    is still running: what ``wait_for_batch`` raises for it."""

    def __init__(self, batch_id: object) -> None:
        super().__init__(f"batch {batch_id} was aborted after consecutive failures")
        self.batch_id = batch_id


class EmptyBatchError(TaskqError):
    """``wait_for_batch`` found fewer children than expected (none, or under
    ``expect_at_least``) and none left to wait for."""


class ActorConfigDriftError(TaskqError):
    """A structural actor_config field (queue, metadata) differs from the code."""


# What every long-lived loop shrugs off: back off and try again (the backend raises only these
# for database trouble; nothing above it sees a driver's own exceptions).
TRANSIENT_ERRORS: tuple[type[TaskqError], ...] = (DatabaseUnavailableError, TransientDatabaseError)


class HealthSocketInUseError(ConfigError):
    """The health socket path is served by another live process; it is not taken over."""
