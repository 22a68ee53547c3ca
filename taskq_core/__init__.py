"""taskq_core: the TaskQ library (backends, state machine, worker runtime, supervisor logic).

The public API is what ``__all__`` lists; everything else is internal.
"""

from taskq_core.actors import ActorRef, JobContext, actor
from taskq_core.client import EnqueueItem, JobsClient
from taskq_core.di import ProviderRegistry, Scope
from taskq_core.errors import (
    ConfigError,
    JobNotFoundError,
    MaxPendingExceededError,
    PayloadValidationError,
    TaskqError,
)
from taskq_core.retry import RetryAfter, RetryPolicy, Snooze
from taskq_core.settings import TaskqSettings
from taskq_core.statemachine import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus

__all__ = [
    "ACTIVE_STATUSES",
    "TERMINAL_STATUSES",
    "ActorRef",
    "ConfigError",
    "EnqueueItem",
    "JobContext",
    "JobNotFoundError",
    "JobStatus",
    "JobsClient",
    "MaxPendingExceededError",
    "PayloadValidationError",
    "ProviderRegistry",
    "RetryAfter",
    "RetryPolicy",
    "Scope",
    "Snooze",
    "TaskqError",
    "TaskqSettings",
    "actor",
]
