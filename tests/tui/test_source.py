"""The dashboard's read model without Textual: the jobs filter syntax, snapshots built by
BackendSource, worker states, failure wording and the small renderings."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from taskq_cli.dashboard.failures import describe_failure
from taskq_cli.dashboard.filters import DEFAULT_JOB_STATUSES, JobsFilter
from taskq_cli.dashboard.source import DashboardSettings
from taskq_cli.operator import operator_id as operator
from taskq_cli.tui.formatting import Palette, short_id, sparkline
from taskq_core.backend.protocol import PrunePolicy
from taskq_core.errors import DatabaseUnavailableError, TransientDatabaseError
from taskq_core.explain import ExplainSettings
from taskq_core.statemachine import JobStatus
from tests.tui.conftest import Dashboard

# --- JobsFilter ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", JobsFilter()),
        ("   ", JobsFilter()),
        ("queue=media", JobsFilter(queue="media")),
        ("actor=resize queue=media", JobsFilter(queue="media", actor="resize")),
        ("status=pending", JobsFilter((JobStatus.PENDING,))),
        ("status=failed,crashed,cancelled", JobsFilter((JobStatus.FAILED, JobStatus.CRASHED,
                                                        JobStatus.CANCELLED))),
        ("status=all queue=q", JobsFilter((), queue="q")),
    ],
)  # fmt: skip
def test_the_filter_line_is_read_into_a_jobs_filter(text: str, expected: JobsFilter) -> None:
    assert JobsFilter.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("media", "cannot read 'media'"),
        ("queue=", "cannot read 'queue='"),
        ("owner=me", "cannot read 'owner=me'"),
        ("queue=a queue=b", "queue is given twice"),
        ("status=done", "unknown status 'done'"),
        ("status=,", "at least one status"),
    ],
)
def test_a_filter_line_that_cannot_be_read_says_why(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        JobsFilter.parse(text)


@pytest.mark.parametrize(
    "jobs_filter",
    [
        JobsFilter(),
        JobsFilter(queue="media"),
        JobsFilter((JobStatus.RUNNING,), actor="resize"),
        JobsFilter((), queue="q", actor="a"),
    ],
)
def test_a_filter_round_trips_through_its_text(jobs_filter: JobsFilter) -> None:
    assert JobsFilter.parse(jobs_filter.to_text()) == jobs_filter


def test_a_filter_describes_itself_for_the_pane_title() -> None:
    assert JobsFilter().describe() == "Recent failures"
    assert JobsFilter(queue="media").describe() == "Recent failures (queue media)"
    assert JobsFilter((), actor="a").describe() == "Recent jobs (actor a)"
    assert JobsFilter((JobStatus.PENDING, JobStatus.SCHEDULED)).describe() == (
        "Recent pending, scheduled"
    )


def test_the_default_filter_is_failed_and_crashed_everywhere() -> None:
    backend_filter = JobsFilter().job_filter(100)
    assert DEFAULT_JOB_STATUSES == (JobStatus.FAILED, JobStatus.CRASHED)
    assert backend_filter.statuses() == {JobStatus.FAILED, JobStatus.CRASHED}
    assert JobsFilter(()).job_filter(10).statuses() is None


# --- BackendSource --------------------------------------------------------------------------------


async def test_a_snapshot_totals_active_jobs_and_recent_finishes(dashboard: Dashboard) -> None:
    snapshot = await dashboard.source.snapshot(JobsFilter())
    assert snapshot.now == dashboard.clock.now()
    totals = snapshot.totals()
    assert list(totals) == list(JobStatus)
    assert (totals[JobStatus.PENDING], totals[JobStatus.SCHEDULED], totals[JobStatus.RUNNING]) == (
        48,
        4,
        3,
    )
    assert totals[JobStatus.FAILED] == 4 and totals[JobStatus.SUCCEEDED] == 127
    assert len(snapshot.finished_per_minute) == 20
    assert snapshot.finished_last_minute == 4
    assert snapshot.finished_rate(5) == sum(snapshot.finished_per_minute[-5:]) / 5
    leader = snapshot.leader
    assert leader is not None and leader.row.id == dashboard.seeded.leader


async def test_workers_are_ordered_by_state_and_old_stopped_ones_drop_out(
    dashboard: Dashboard,
) -> None:
    snapshot = await dashboard.source.snapshot(JobsFilter())
    assert [(w.row.label, w.state) for w in snapshot.workers] == [
        ("emails-1", "running"),
        ("media-1", "running"),
        ("reports-1", "stale"),
        ("reports-0", "stopped"),
    ]
    dashboard.clock.advance(3600)  # an hour later the stopped worker is no longer listed
    later = await dashboard.source.snapshot(JobsFilter())
    assert [w.row.label for w in later.workers] == ["emails-1", "media-1", "reports-1"]
    assert {w.state for w in later.workers} == {"stale"}


async def test_stale_after_comes_from_the_settings(dashboard: Dashboard) -> None:
    dashboard.source.settings = DashboardSettings(
        explain=ExplainSettings(worker_stale_after=timedelta(minutes=10))
    )
    snapshot = await dashboard.source.snapshot(JobsFilter())
    assert [w.state for w in snapshot.workers].count("stale") == 0


async def test_pause_notes_are_read_when_a_queue_is_paused_and_again_when_old(
    dashboard: Dashboard,
) -> None:
    source, backend, clock = dashboard.source, dashboard.backend, dashboard.clock
    first = await source.snapshot(JobsFilter())
    note = first.pauses["reports"]
    assert (note.paused_by, note.reason) == ("ops@node-a", "month-end freeze")
    assert set(first.pauses) == {"reports"}
    # Another operator pauses it anew: the note is not read on every refresh...
    await backend.update_queue("reports", paused=True, paused_by="bob@b", pause_reason="audit")
    clock.advance(timedelta(seconds=10))
    assert (await source.snapshot(JobsFilter())).pauses["reports"].reason == "month-end freeze"
    # ...but once it is older than pause_note_max_age.
    clock.advance(DashboardSettings().pause_note_max_age)
    assert (await source.snapshot(JobsFilter())).pauses["reports"].paused_by == "bob@b"
    # A pause from the dashboard itself shows at the next refresh, with who and why.
    await source.set_queue_paused("media", True, "deploy")
    later = await source.snapshot(JobsFilter())
    assert (later.pauses["media"].paused_by, later.pauses["media"].reason) == (operator(), "deploy")
    await source.set_queue_paused("reports", False)
    assert set((await source.snapshot(JobsFilter())).pauses) == {"media"}


async def test_job_detail_has_attempts_and_events(dashboard: Dashboard) -> None:
    failed = dashboard.seeded.failed[0]
    detail = await dashboard.source.job_detail(failed.id)
    assert detail is not None
    assert detail.job.id == failed.id
    assert [a.outcome for a in detail.attempts] == ["failed"]
    assert [(e.from_status, e.to_status) for e in detail.events] == [
        (JobStatus.PENDING, JobStatus.RUNNING),
        (JobStatus.RUNNING, JobStatus.FAILED),
    ]


async def test_job_detail_of_an_archived_job_has_its_attempts_and_no_events(
    dashboard: Dashboard,
) -> None:
    failed = dashboard.seeded.failed[0]
    dashboard.clock.advance(timedelta(days=2).total_seconds())
    policy = PrunePolicy({JobStatus.FAILED: timedelta(days=1)}, timedelta(days=30))
    await dashboard.backend.prune_jobs(policy)
    detail = await dashboard.source.job_detail(failed.id)
    assert detail is not None and detail.archived is not None
    assert detail.job.id == failed.id and detail.job.status is JobStatus.FAILED
    assert [a.outcome for a in detail.attempts] == ["failed"]
    assert detail.events == []
    assert await dashboard.source.job_detail(uuid4()) is None


# --- failures -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (TimeoutError(), (True, "no answer within 5s")),
        (DatabaseUnavailableError("cannot connect to PostgreSQL at h:5432"),
         (True, "cannot connect to PostgreSQL at h:5432")),
        (DatabaseUnavailableError("PostgreSQL is unavailable (connection was closed\n in the "
                                  "middle)"),
         (True, "PostgreSQL is unavailable (connection was closed in the middle)")),
        (TransientDatabaseError("PostgreSQL asked for a retry (deadlock detected)"),
         (True, "PostgreSQL asked for a retry (deadlock detected)")),
        (ValueError("bad"), (False, "ValueError: bad")),
    ],
)  # fmt: skip
def test_failures_are_described_in_one_line(
    error: BaseException, expected: tuple[bool, str]
) -> None:
    assert describe_failure(error, 5.0) == expected


# --- renderings -----------------------------------------------------------------------------------


def test_a_sparkline_scales_to_its_peak() -> None:
    assert sparkline([]) == ""
    assert sparkline([0, 0, 0]) == "▁▁▁"
    assert sparkline([0, 1, 2, 4, 8]) == "▁▂▃▅█"
    assert sparkline([1, 1000]) == "▂█"  # any activity shows above the baseline


def test_short_ids_keep_the_random_tail_of_a_uuid() -> None:
    assert short_id(UUID("01890a5d-ac96-774b-bcce-b302099a8057")) == "b302099a8057"


def test_the_palette_takes_its_colours_from_the_theme() -> None:
    palette = Palette.from_variables({"success": "#4EBF71", "error": "#B93C5B", "accent": "auto"})
    assert palette.good == "#4EBF71" and palette.bad == "#B93C5B"
    assert palette.accent == ""  # not a plain colour: no style rather than a wrong one
    assert palette.muted == "dim"
    assert str(palette.status(JobStatus.FAILED).style) == "#B93C5B"
    assert palette.waited(None, "-").style == "dim"
    assert palette.waited(timedelta(minutes=11), "11m").style == "#B93C5B"
