"""The answer explain gives: its settings, the checks, the verdict, and the wording helpers
every finding uses (times relative to the backend's now, job ids named up to a few).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from taskq_core.backend.protocol import (
    JobRow,
    JobSummary,
)
from taskq_core.backend.protocol.workflows import WORKFLOW_ID_KEY, WORKFLOW_STEP_KEY
from taskq_core.constants import CANCEL_RECLAIM_HEADROOM
from taskq_core.durations import format_duration
from taskq_core.liveness import DEFAULT_STALE_AFTER, worker_stale_after
from taskq_core.settings import TaskqSettings

Situation = Literal["terminal", "archived", "running", "waiting"]

# How many job ids a finding names before it says "and N more".
NAMED_JOBS = 5
# The default graces (TASKQ_CANCELLATION_GRACE_PERIOD + TASKQ_CLEANUP_GRACE_PERIOD), read from
# the settings model so the two never disagree.
_DEFAULT_GRACES = timedelta(
    seconds=TaskqSettings.model_fields["cancellation_grace_period"].default
    + TaskqSettings.model_fields["cleanup_grace_period"].default
)


@dataclass(frozen=True)
class ExplainSettings:
    """How explain judges liveness and reclaim timing (filled from TaskqSettings).

    ``worker_stale_after``: a worker (or leader) not seen for longer has lost its
    heartbeat. ``cancel_reclaim_headroom``: added to a running job's lease when a cancel is
    in flight (cancellation grace + cleanup grace + CANCEL_RECLAIM_HEADROOM, as the reclaim
    sweep does).
    """

    worker_stale_after: timedelta = DEFAULT_STALE_AFTER
    cancel_reclaim_headroom: timedelta = _DEFAULT_GRACES + CANCEL_RECLAIM_HEADROOM

    @classmethod
    def from_settings(cls, settings: TaskqSettings) -> ExplainSettings:
        """The workers' own cadences: liveness as ``taskq_core.liveness`` derives it, and the
        reclaim sweep's cancel headroom."""
        graces = settings.cancellation_grace_period + settings.cleanup_grace_period
        return cls(
            worker_stale_after=worker_stale_after(settings),
            cancel_reclaim_headroom=timedelta(seconds=graces) + CANCEL_RECLAIM_HEADROOM,
        )


@dataclass(frozen=True)
class Check:
    """One blocker the design has, whether it applies to this job, and the fact behind it.

    ``code`` is a stable snake_case name (scripts match on it); ``message`` says it in words.
    """

    code: str
    applies: bool
    message: str
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Explanation:
    """The answer: the job, the backend's now, every check made and the verdict.

    ``now`` is None for an archived job: nothing in the live tables was read, and its
    finding names absolute times only.
    """

    job: JobRow
    now: datetime | None
    situation: Situation
    checks: list[Check]

    @property
    def origin(self) -> str | None:
        """Where the job came from, when it is a workflow's step or a cron schedule made it
        (see ``job_origin``)."""
        return job_origin(self.job)

    @property
    def verdict(self) -> Check:
        """The first check that applies; a ``runnable`` finding when none does."""
        for check in self.checks:
            if check.applies:
                return check
        return Check(
            "runnable",
            True,
            "nothing blocks it: the next dispatch of a worker consuming "
            f"{self.job.queue!r} should claim it",
        )


def job_origin(job: JobRow) -> str | None:
    """``step NAME of workflow ID`` for a workflow's step (``metadata.workflow_id``,
    ``workflow_step``); ``from schedule NAME (fire time T)``, or ``(run by hand)`` for
    ``taskq schedules run``, read from the metadata a schedule's job carries (``schedule``,
    ``fire_time``, ``manual``); None for a job neither made."""
    workflow = job.metadata.get(WORKFLOW_ID_KEY)
    if isinstance(workflow, str):
        return f"step {job.metadata.get(WORKFLOW_STEP_KEY, '?')} of workflow {workflow}"
    name = job.metadata.get("schedule")
    if not isinstance(name, str):
        return None
    if job.metadata.get("manual"):
        return f"from schedule {name} (run by hand)"
    fire_time = job.metadata.get("fire_time")
    return f"from schedule {name}" + (f" (fire time {fire_time})" if fire_time else "")


def ago(now: datetime, then: datetime) -> str:
    delta = now - then
    if delta < timedelta(0):
        return f"in {format_duration(-delta)}"
    return f"{format_duration(delta)} ago"


def stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def when(now: datetime, then: datetime) -> str:
    return f"{stamp(then)} ({ago(now, then)})"


def name_jobs(jobs: Sequence[JobSummary]) -> str:
    named = ", ".join(str(job.id) for job in jobs[:NAMED_JOBS])
    more = len(jobs) - NAMED_JOBS
    return named + (f" and {more} more" if more > 0 else "")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
