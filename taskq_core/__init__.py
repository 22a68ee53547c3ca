"""taskq_core: the TaskQ library (backends, state machine, worker runtime, supervisor logic)."""

from taskq_core.statemachine import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus

__all__ = ["ACTIVE_STATUSES", "TERMINAL_STATUSES", "JobStatus"]
