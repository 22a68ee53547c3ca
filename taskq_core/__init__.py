"""taskq_core: the TaskQ library (backends, state machine, worker runtime, supervisor logic).

The public API is what ``__all__`` lists; everything else is internal. The names load on first
use (PEP 562), so importing one small module of the package (the CLI's start-up, its shell
completion) does not pay for the client, the settings and pydantic.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taskq_core.actors import ActorRef, JobContext, actor
    from taskq_core.batches import AbortBatchAfter, BatchCompletionStatus, BatchEnqueued
    from taskq_core.client import JobsClient
    from taskq_core.cron_schedules import cron
    from taskq_core.di import ProviderRegistry, Scope
    from taskq_core.enqueue_plan import EnqueueItem
    from taskq_core.errors import (
        BatchAbortedError,
        ConfigError,
        EmptyBatchError,
        JobNotFoundError,
        MaxPendingExceededError,
        PayloadTooLargeError,
        PayloadValidationError,
        ScheduleNotFoundError,
        TaskqError,
        UnknownActorError,
    )
    from taskq_core.ratelimit.primitives import (
        ConcurrencyReservation,
        KeyedRateLimitRef,
        KeyedReservationRef,
        SlidingWindow,
        TokenBucket,
    )
    from taskq_core.ratelimit.registry import RateLimitRegistry
    from taskq_core.retry import RetryAfter, RetryPolicy, Snooze
    from taskq_core.settings import TaskqSettings
    from taskq_core.statemachine import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus
    from taskq_core.workflows import Step, Workflow, WorkflowRun

# Each public name and the module that defines it.
_HOMES = {
    "ACTIVE_STATUSES": "statemachine",
    "TERMINAL_STATUSES": "statemachine",
    "JobStatus": "statemachine",
    "ActorRef": "actors",
    "JobContext": "actors",
    "actor": "actors",
    "AbortBatchAfter": "batches",
    "BatchCompletionStatus": "batches",
    "BatchEnqueued": "batches",
    "EnqueueItem": "enqueue_plan",
    "JobsClient": "client",
    "cron": "cron_schedules",
    "ProviderRegistry": "di",
    "Scope": "di",
    "BatchAbortedError": "errors",
    "ConfigError": "errors",
    "EmptyBatchError": "errors",
    "JobNotFoundError": "errors",
    "MaxPendingExceededError": "errors",
    "PayloadTooLargeError": "errors",
    "PayloadValidationError": "errors",
    "ScheduleNotFoundError": "errors",
    "TaskqError": "errors",
    "UnknownActorError": "errors",
    "ConcurrencyReservation": "ratelimit.primitives",
    "KeyedRateLimitRef": "ratelimit.primitives",
    "KeyedReservationRef": "ratelimit.primitives",
    "SlidingWindow": "ratelimit.primitives",
    "TokenBucket": "ratelimit.primitives",
    "RateLimitRegistry": "ratelimit.registry",
    "RetryAfter": "retry",
    "RetryPolicy": "retry",
    "Snooze": "retry",
    "TaskqSettings": "settings",
    "Step": "workflows",
    "Workflow": "workflows",
    "WorkflowRun": "workflows",
}

__all__ = [
    "ACTIVE_STATUSES",
    "TERMINAL_STATUSES",
    "AbortBatchAfter",
    "ActorRef",
    "BatchAbortedError",
    "BatchCompletionStatus",
    "BatchEnqueued",
    "ConcurrencyReservation",
    "ConfigError",
    "EmptyBatchError",
    "EnqueueItem",
    "JobContext",
    "JobNotFoundError",
    "JobStatus",
    "JobsClient",
    "KeyedRateLimitRef",
    "KeyedReservationRef",
    "MaxPendingExceededError",
    "PayloadTooLargeError",
    "PayloadValidationError",
    "ProviderRegistry",
    "RateLimitRegistry",
    "RetryAfter",
    "RetryPolicy",
    "ScheduleNotFoundError",
    "Scope",
    "SlidingWindow",
    "Snooze",
    "Step",
    "TaskqError",
    "TaskqSettings",
    "TokenBucket",
    "UnknownActorError",
    "Workflow",
    "WorkflowRun",
    "actor",
    "cron",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'taskq_core' has no attribute {name!r}")
    value = getattr(import_module(f"taskq_core.{home}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
