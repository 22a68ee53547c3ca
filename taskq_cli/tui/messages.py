"""Messages between the dashboard's workers, panes and screens, and the app that owns them.

Refresh workers report with SnapshotLoaded / RefreshFailed; panes and the detail screen ask
the app for things (a job's details, a new jobs filter, an action on a job) with the others.
The app is the only place that talks to the DashboardSource.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from uuid import UUID

from textual.message import Message

from taskq_cli.dashboard.filters import JobsFilter
from taskq_cli.dashboard.snapshot import Snapshot

JobAction = Literal["cancel", "retry"]


@dataclass
class SnapshotLoaded(Message):
    """A refresh finished: show this snapshot."""

    snapshot: Snapshot


@dataclass
class RefreshFailed(Message):
    """A refresh failed; ``unreachable`` when the database could not be reached."""

    reason: str
    unreachable: bool


@dataclass
class JobChosen(Message):
    """The operator picked a job (Enter): open its detail screen."""

    job_id: UUID


@dataclass
class JobsFilterChanged(Message):
    """The operator submitted a new jobs filter."""

    jobs_filter: JobsFilter


@dataclass
class JobActionRequested(Message):
    """The operator asked to cancel or retry this job (confirmation still to come)."""

    job_id: UUID
    action: JobAction
