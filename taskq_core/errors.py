"""The exception hierarchy. Every error a user can cause is a TaskqError with a one-line message."""

from __future__ import annotations


class TaskqError(Exception):
    """Base of every error TaskQ raises on purpose; its message is one line meant for humans."""


class ConfigError(TaskqError):
    """A setting, DSN, file or argument is malformed or violates an invariant."""


class InvalidIdentifierError(ConfigError):
    """A schema (or other SQL identifier) would be unsafe to interpolate."""


class DatabaseUnavailableError(TaskqError):
    """PostgreSQL could not be reached or refused the connection."""


class MigrationError(TaskqError):
    """A migration failed to apply, or the schema is not migrated."""


class JobNotFoundError(TaskqError):
    """No job has the given id."""


class InvalidTransitionError(TaskqError):
    """A state change the state machine does not allow."""


class PayloadValidationError(TaskqError):
    """A payload does not match the actor's model."""


class MaxPendingExceededError(TaskqError):
    """Enqueue refused: the actor already has max_pending jobs waiting."""


class WorkerOwnershipMismatchError(TaskqError):
    """A terminal write targeted a job this worker does not own."""


class ActorConfigDriftError(TaskqError):
    """A structural actor_config field (queue, metadata) differs from the code."""
