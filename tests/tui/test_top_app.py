"""TopApp on a seeded in-memory backend: each pane's content, the jobs filter, the detail
screen, every action and its effect on the data, and the unreachable-database notice."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

import pytest
from rich.terminal_theme import SVG_EXPORT_THEME
from textual.widgets import DataTable, Input

from taskq_cli.dashboard.filters import JobsFilter
from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.dashboard.source import BackendSource
from taskq_cli.operator import operator_id as operator
from taskq_cli.tui.app import TopApp
from taskq_cli.tui.widgets.confirm import ConfirmScreen, ReasonScreen
from taskq_cli.tui.widgets.job_detail import JobDetailScreen
from taskq_cli.tui.widgets.workers_table import LEADER_MARK
from taskq_core.backend.protocol import PrunePolicy
from taskq_core.errors import DatabaseUnavailableError
from taskq_core.statemachine import JobStatus
from tests.tui.conftest import SIZE, WIDE, Dashboard, settle, top_app


def cells(table: DataTable[Any]) -> list[list[str]]:
    """Every row of a table as plain strings."""
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


def column(table: DataTable[Any], name: str) -> list[str]:
    """One column of a table by its header."""
    labels = [str(c.label) for c in table.ordered_columns]
    index = labels.index(name)
    return [row[index] for row in cells(table)]


def by_first_column(table: DataTable[Any]) -> dict[str, list[str]]:
    """Rows keyed by their first cell."""
    return {row[0]: row for row in cells(table)}


def why(table: DataTable[Any], queue: str) -> str:
    """The queues pane's why cell of one queue (whatever columns the width left)."""
    return dict(zip(column(table, "queue"), column(table, "why"), strict=True))[queue]


def field(text: str, name: str) -> str:
    """The value of one ``name  value`` line of the detail screen's fields."""
    found = re.search(rf"^{re.escape(name)} +(.*)$", text, re.MULTILINE)
    assert found is not None, (name, text)
    return found.group(1)


async def select_row(table: DataTable[Any], key: str) -> None:
    """Put the table's cursor on the row with this key."""
    table.move_cursor(row=table.get_row_index(key))


# --- panes ------------------------------------------------------------------------------------


async def test_the_queues_pane_shows_every_queue_with_its_counts_and_settings(
    dashboard: Dashboard,
) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        table = app.queues_table
        assert [str(c.label) for c in table.ordered_columns] == [
            "queue",
            "pending",
            "scheduled",
            "running",
            "failed 1h",
            "finished/min (20m)",
            "oldest pending",
            "why",
            "mode",
            "max",
        ]
        rows = by_first_column(table)
        assert list(rows) == ["emails", "media", "reports", "webhooks"]
        assert rows["media"][1:5] == ["42", "0", "3", "3"]
        assert rows["emails"][1:4] == ["6", "0", "0"]
        assert rows["emails"][6] == "21m20s"  # the oldest email waits since the seed began
        assert rows["reports"][2] == "4" and rows["reports"][4] == "1"
        # Who paused it, how long ago and why (the pause note, read beside the stats).
        assert rows["reports"][7] == "paused 20s by ops@node-a: month-end freeze"
        assert rows["media"][7] == ""
        # Old pending work with a live, free consumer: the blocker is per job.
        assert rows["emails"][7] == "per job (e)"
        assert rows["webhooks"][8:10] == ["round_robin", "8"]
        assert rows["reports"][6] == "-"  # nothing pending
        sparkline = rows["media"][5]
        assert len(sparkline) == 20 and set(sparkline) <= set("▁▂▃▄▅▆▇█")
        assert "█" in sparkline


async def test_the_workers_pane_marks_the_leader_and_colours_silent_workers(
    dashboard: Dashboard,
) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        table = app.workers_table
        rows = {row[1]: row for row in cells(table)}
        # Live first, then stale; the stopped worker is hidden and counted in the title.
        assert list(rows) == ["emails-1", "media-1", "reports-1"]
        title = app.query_one("#workers-pane").border_title
        assert title == "Workers · 2 live · 1 stale · 1 stopped (hidden, w shows)"
        assert rows["media-1"][0] == LEADER_MARK
        assert [rows[label][0] for label in ("emails-1", "reports-1")] == [""] * 2
        assert rows["media-1"][2:5] == ["node-a", "4101", "prod-a"]
        assert [rows[label][5] for label in rows] == ["running", "running", "stale"]
        assert rows["reports-1"][6] == "3m20s ago"
        assert rows["media-1"][7] == "2/8" and rows["emails-1"][7] == "1/4"
        assert rows["media-1"][9] == str(dashboard.seeded.leader)  # the whole worker id
        # The stale worker's "last seen" carries the theme's error colour.
        stale_cell = table.get_row_at(2)[6]
        assert str(stale_cell.style).lower() == app.theme_variables["error"].lower()

        await pilot.press("w")
        await settle(pilot)
        assert [row[1] for row in cells(table)] == ["emails-1", "media-1", "reports-1", "reports-0"]
        assert cells(table)[3][5] == "stopped"
        assert str(app.query_one("#workers-pane").border_title).endswith("· 1 stopped")


async def test_the_summary_names_the_database_leader_totals_and_rate(
    dashboard: Dashboard,
) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        summary = str(app.summary.render())
        assert "database localhost:5432/taskq" in summary
        assert "schema public" in summary
        assert "leader media-1 (node-a:4101)" in summary
        assert "pending 48  scheduled 4  running 3" in summary
        assert "last 1h: succeeded 127  failed 4  cancelled 0  crashed 0  abandoned 0" in summary
        assert "finished/min 4 now" in summary
        assert "oldest pending 21m20s" in summary


async def test_the_jobs_pane_opens_on_recent_failures_newest_first(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.jobs_pane.table
        assert app.focused is table
        failed = sorted(dashboard.seeded.failed, key=lambda j: j.finished_at or 0, reverse=True)
        assert [row.key.value for row in table.ordered_rows] == [str(j.id) for j in failed]
        assert column(table, "status") == ["failed"] * 4
        assert column(table, "error")[1] == "KeyError: 'region'"
        assert column(table, "when")[0] == "3m20s ago"
        assert app.jobs_pane.border_title == "Recent failures · 4"


async def test_the_footer_shows_the_keys(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        shown = {
            binding.key: binding.description
            for (_, binding, enabled, _) in app.screen.active_bindings.values()
            if binding.show and enabled
        }
        expected = {
            "q": "Quit",
            "slash": "Filter",
            "e": "Explain",
            "c": "Cancel",
            "r": "Retry",
            "y": "Copy id",
            "p": "Pause/resume",
            "w": "Stopped",
            "ctrl+r": "Refresh",
            "enter": "Details",
        }
        assert expected.items() <= shown.items()


async def test_refreshes_keep_the_cursor_on_the_same_row(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await select_row(app.queues_table, "reports")
        second = app.jobs_pane.table.ordered_rows[1].key.value
        await pilot.press("down")
        assert (
            app.jobs_pane.table.coordinate_to_cell_key(
                app.jobs_pane.table.cursor_coordinate
            ).row_key.value
            == second
        )
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert app.queues_table.selected is not None
        assert app.queues_table.selected.name == "reports"
        selected = app.jobs_pane.table.selected
        assert selected is not None and str(selected.id) == second


# --- filter -----------------------------------------------------------------------------------


async def test_the_filter_narrows_the_jobs_pane(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash")
        field = app.query_one("#jobs-filter", Input)
        assert app.focused is field and field.has_class("-open")
        await pilot.press(*"queue=emails status=pending", "enter")
        await settle(pilot)
        table = app.jobs_pane.table
        assert app.jobs_filter == JobsFilter((JobStatus.PENDING,), queue="emails")
        assert table.row_count == 6
        assert set(column(table, "queue")) == {"emails"}
        assert set(column(table, "status")) == {"pending"}
        assert app.jobs_pane.border_title == "Recent pending (queue emails) · 6"
        assert app.focused is table and not field.has_class("-open")

        await pilot.press("slash")
        assert field.value == "queue=emails status=pending"
        field.value = "actor=build_report status=all"
        await pilot.press("enter")
        await settle(pilot)
        assert sorted(column(table, "status")) == ["failed"] + ["scheduled"] * 4
        assert set(column(table, "actor")) == {"build_report"}

        await pilot.press("slash")
        field.value = ""
        await pilot.press("enter")
        await settle(pilot)
        assert app.jobs_filter.is_default and table.row_count == 4


async def test_a_filter_that_cannot_be_read_is_refused_and_changes_nothing(
    dashboard: Dashboard,
) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"status=done", "enter")
        await settle(pilot)
        assert app.jobs_filter.is_default
        assert app.focused is app.query_one("#jobs-filter", Input)
        assert any("unknown status 'done'" in n.message for n in app._notifications)
        await pilot.press("escape")
        assert app.focused is app.jobs_pane.table
        assert app.jobs_pane.table.row_count == 4


# --- detail screen ----------------------------------------------------------------------------


async def test_enter_opens_the_job_detail_screen(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    failed = max(dashboard.seeded.failed, key=lambda j: j.finished_at or 0)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, JobDetailScreen)
        assert screen.job_id == failed.id

        def section(name: str) -> str:
            return str(screen.query_one(f"#detail-{name}").render())

        fields = section("fields")
        assert field(fields, "id") == str(failed.id)
        assert field(fields, "status") == "failed"
        assert field(fields, "attempt") == "#1, 1 of 3 used (transient)"
        assert field(fields, "worker") == str(dashboard.seeded.busy)
        assert '"url": "s3://img/broken-17.png"' in section("payload")
        outcome = section("outcome")
        assert "ConnectionResetError: upstream closed the connection" in outcome
        assert 'File "app/media.py", line 42, in resize' in outcome
        assert re.search(r"#1 failed\s", section("attempts"))
        events = section("events")
        assert "pending → running" in events and "running → failed" in events
        assert screen.query_one("#detail-outcome").border_title == "Error"

        await pilot.press("escape")
        assert not isinstance(app.screen, JobDetailScreen)
        assert app.focused is app.jobs_pane.table


async def test_a_job_that_vanished_is_reported_not_opened(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        job = app.jobs_pane.table.selected
        assert job is not None
        del dashboard.backend._jobs[job.id]  # gone between the refresh and the Enter
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, JobDetailScreen)
        assert any("no longer exists" in n.message for n in app._notifications)


async def test_a_job_archived_since_the_refresh_opens_with_an_archived_banner(
    dashboard: Dashboard,
) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        job = app.jobs_pane.table.selected
        assert job is not None and job.status is JobStatus.FAILED
        # The prune moves it between the refresh and the Enter.
        dashboard.clock.advance(timedelta(days=2).total_seconds())
        policy = PrunePolicy({JobStatus.FAILED: timedelta(days=1)}, timedelta(days=30))
        assert (await dashboard.backend.prune_jobs(policy)).total >= 1
        archived = await dashboard.backend.get_archived_job(job.id)
        assert archived is not None
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, JobDetailScreen) and screen.job_id == job.id

        banner = screen.query_one("#detail-archived")
        assert banner.has_class("-visible") and banner.display
        text = str(banner.render())
        assert text.startswith(f"ARCHIVED at {archived.archived_at.isoformat(timespec='seconds')}")
        assert f"deletes it at {archived.expire_at.isoformat(timespec='seconds')}" in text
        assert field(str(screen.query_one("#detail-fields").render()), "status") == "failed"
        assert re.search(r"#1 failed\s", str(screen.query_one("#detail-attempts").render()))
        events = screen.query_one("#detail-events")
        assert events.border_title == "Events (deleted)"
        assert str(events.render()) == "deleted when the job was archived (by design)"

        # Nothing acts on an archived job: no confirmation, a notice instead.
        await pilot.press("r")
        await settle(pilot)
        assert app.screen is screen
        assert any("is archived: it cannot be retried" in n.message for n in app._notifications)


async def test_a_live_job_has_no_archived_banner(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, JobDetailScreen)
        banner = screen.query_one("#detail-archived")
        assert not banner.has_class("-visible") and not banner.display


# --- actions ----------------------------------------------------------------------------------


async def _filter(pilot: Any, text: str) -> None:
    await pilot.press("slash")
    pilot.app.query_one("#jobs-filter", Input).value = text
    await pilot.press("enter")
    await settle(pilot)


async def test_cancel_asks_first_then_cancels_the_selected_job(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await _filter(pilot, "queue=emails status=pending")
        job = app.jobs_pane.table.selected
        assert job is not None and job.status is JobStatus.PENDING

        await pilot.press("c")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert "Cancel job" in app.screen.question and "send_email on emails" in app.screen.question
        await pilot.press("n")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        assert (await dashboard.backend.get(job.id)).status is JobStatus.PENDING  # type: ignore[union-attr]

        await pilot.press("c", "y")
        await settle(pilot)
        row = await dashboard.backend.get(job.id)
        assert row is not None and row.status is JobStatus.CANCELLED
        assert row.cancel_reason == "cancelled from taskq top"
        assert app.jobs_pane.table.row_count == 5  # the refresh after the action dropped it
        assert any(n.message.endswith(": cancelled") for n in app._notifications)


async def test_cancelling_a_running_job_asks_its_worker_to_stop(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await _filter(pilot, "status=running")
        job = app.jobs_pane.table.selected
        assert job is not None
        await pilot.press("c", "y")
        await settle(pilot)
        row = await dashboard.backend.get(job.id)
        assert row is not None and row.status is JobStatus.RUNNING and row.cancel_phase == 1
        assert any("cancel requested" in n.message for n in app._notifications)


async def test_retry_re_pends_the_selected_failed_job(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        job = app.jobs_pane.table.selected
        assert job is not None and job.status is JobStatus.FAILED
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        row = await dashboard.backend.get(job.id)
        assert row is not None and row.status is JobStatus.PENDING and row.attempts_used == 0
        assert str(job.id) not in {r.key.value for r in app.jobs_pane.table.ordered_rows}


async def test_actions_that_cannot_apply_are_refused_without_asking(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("c")  # a failed job: already finished
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        await _filter(pilot, "status=pending queue=media")
        await pilot.press("r")  # a pending job cannot be retried
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        messages = [n.message for n in app._notifications]
        assert any("nothing to cancel" in m for m in messages)
        assert any("only failed, crashed or cancelled jobs can be retried" in m for m in messages)


async def test_pause_and_resume_the_selected_queue(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.queues_table.focus()
        await select_row(app.queues_table, "media")
        await pilot.press("p")
        await settle(pilot)
        assert isinstance(app.screen, ReasonScreen)
        assert app.screen.question == "Pause queue 'media'?"
        # y and n are letters of the reason here, not answers.
        await pilot.press(*"deploy yn", "enter")
        await settle(pilot)
        queue = await dashboard.backend.get_queue("media")
        assert queue is not None and queue.paused
        assert queue.pause is not None and queue.pause.reason == "deploy yn"
        assert queue.pause.paused_by == operator()
        dashboard.clock.advance(timedelta(minutes=3))
        app.action_refresh_now()
        await settle(pilot)
        note = f"paused 3m by {operator()}: deploy yn"
        assert why(app.queues_table, "media") == note

        await pilot.press("p")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question == "Resume queue 'media'?"
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.detail.startswith(f"Paused 3m by {operator()}: deploy yn. Workers")
        await pilot.press("y")
        await settle(pilot)
        queue = await dashboard.backend.get_queue("media")
        assert queue is not None and not queue.paused and queue.pause is None
        # (Three minutes on, its workers are silent: that is what holds it now.)
        assert why(app.queues_table, "media") == "no live worker (2 stale)"


async def test_a_pause_without_a_reason_and_a_pause_backed_out(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.queues_table.focus()
        await select_row(app.queues_table, "media")
        await pilot.press("p", "x", "escape")
        await settle(pilot)
        queue = await dashboard.backend.get_queue("media")
        assert queue is not None and not queue.paused
        await pilot.press("p", "enter")
        await settle(pilot)
        queue = await dashboard.backend.get_queue("media")
        assert queue is not None and queue.paused
        assert queue.pause is not None and queue.pause.reason is None
        assert why(app.queues_table, "media") == f"paused 0s by {operator()}"


async def test_retry_from_the_detail_screen_updates_it(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, JobDetailScreen)
        await pilot.press("r", "y")
        await settle(pilot)
        assert app.screen is screen
        assert screen.detail.job.status is JobStatus.PENDING
        assert field(str(screen.query_one("#detail-fields").render()), "status") == "pending"
        assert "operator_retry" in str(screen.query_one("#detail-events").render())


async def test_main_screen_keys_do_nothing_on_the_detail_screen(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("p", "slash")
        await settle(pilot)
        assert isinstance(app.screen, JobDetailScreen)


# --- failures and quitting ----------------------------------------------------------------------


class FlakySource(BackendSource):
    """A BackendSource whose database can be switched off and back on."""

    down: BaseException | None = None
    delay: float = 0.0

    async def snapshot(self, jobs: JobsFilter) -> Snapshot:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.down is not None:
            raise self.down
        return await super().snapshot(jobs)


async def test_an_unreachable_database_shows_a_notice_keeps_the_data_and_recovers(
    dashboard: Dashboard,
) -> None:
    source = FlakySource(dashboard.backend, database="db.internal:5432/taskq", schema="public")
    app = top_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert not app.banner.has_class("-visible")
        source.down = DatabaseUnavailableError("connection refused")
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert app.banner.has_class("-visible") and app.banner.display
        assert app.banner.notice == (
            "database unreachable: connection refused (retrying; showing data from 00:21:20 UTC)"
        )
        assert app.queues_table.row_count == 4 and app.jobs_pane.table.row_count == 4
        assert app.is_running
        errors = [n for n in app._notifications if n.severity == "error"]
        assert [n.message for n in errors] == ["database unreachable: connection refused"]

        await pilot.press("ctrl+r")  # still down: the notice stays, no second toast
        await settle(pilot)
        assert len([n for n in app._notifications if n.severity == "error"]) == 1

        source.down = None
        dashboard.clock.advance(5)
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert not app.banner.has_class("-visible") and app.banner.notice == ""
        assert "00:21:25 UTC" in str(app.summary.render())
        assert any("answers again" in n.message for n in app._notifications)


async def test_a_database_that_does_not_answer_in_time_counts_as_unreachable(
    dashboard: Dashboard,
) -> None:
    source = FlakySource(dashboard.backend, database="db", schema="public")
    app = top_app(source, timeout=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        source.delay = 5.0
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert app.banner.notice.startswith("database unreachable: no answer within 0.2s")


async def test_any_other_refresh_error_is_a_notice_too(dashboard: Dashboard) -> None:
    source = FlakySource(dashboard.backend, database="db", schema="public")
    source.down = RuntimeError("relation jobs does not exist")
    app = top_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.banner.notice == (
            "refresh failed: RuntimeError: relation jobs does not exist (retrying)"
        )
        assert app.queues_table.row_count == 0 and app.is_running


async def test_q_quits_with_exit_code_0(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def test_the_refresh_timer_refreshes_on_its_own(dashboard: Dashboard) -> None:
    app = TopApp(dashboard.source, refresh=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        dashboard.clock.advance(30)
        moved = dashboard.clock.now()
        # Poll for the timer's own refresh at the new time (one already under way may land
        # first, read at the old time); the bound is generous for a loaded CI machine.
        for _ in range(1000):
            await asyncio.sleep(0.02)
            if app.snapshot is not None and app.snapshot.now == moved:
                break
        assert app.snapshot is not None and app.snapshot.now == moved


@pytest.mark.parametrize("no_color", [False, True])
async def test_no_color_removes_every_colour(
    dashboard: Dashboard, monkeypatch: pytest.MonkeyPatch, no_color: bool
) -> None:
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        svg = app.export_screenshot()
    colours = {c.lower() for c in re.findall(r"(?:fill|color):\s*(#[0-9a-fA-F]{6})", svg)}
    # The SVG template's own window chrome is not the app's output.
    colours -= {SVG_EXPORT_THEME.foreground_color.hex.lower()}
    tinted = {c for c in colours if not c[1:3] == c[3:5] == c[5:7]}
    assert app.no_color is no_color
    assert bool(tinted) is not no_color, tinted
    if not no_color:
        assert app.theme_variables["error"].lower() in colours


def test_the_app_refuses_a_non_positive_refresh(dashboard: Dashboard) -> None:
    with pytest.raises(ValueError):
        TopApp(dashboard.source, refresh=0)


async def test_enter_on_a_queue_lists_that_queues_jobs(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.queues_table.focus()
        await select_row(app.queues_table, "reports")
        await pilot.press("enter")
        await settle(pilot)
        assert app.jobs_filter == JobsFilter(queue="reports")
        assert app.focused is app.jobs_pane.table
        assert column(app.jobs_pane.table, "actor") == ["build_report"]
        assert app.jobs_pane.border_title == "Recent failures (queue reports) · 1"
