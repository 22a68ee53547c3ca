"""Workflows in `taskq top`: the workflows pane lists the running workflows with their steps
by status, keeps a workflow that ended within the window, and hides when none is left; a
step's job detail names its workflow and what a waiting step waits for, and `e` explains a
waiting step by its dependencies. Workflows are enqueued through the client and driven as
workers drive them (tests/workflow_seed.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from textual.widgets import DataTable

from taskq_cli.dashboard.source import BackendSource, DashboardSettings
from taskq_cli.tui.messages import JobChosen
from taskq_cli.tui.widgets.explain import ExplainScreen
from taskq_cli.tui.widgets.job_detail import JobDetailScreen
from tests.tui.conftest import WIDE, Dashboard, screen_text, settle, top_app
from tests.workflow_seed import ERROR, diamond_under_way, make_diamond, run_all, run_step


def rows(table: DataTable[Any]) -> dict[str, list[str]]:
    return {
        str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)]
        for i in range(table.row_count)
    }


def on_screen(app: Any, value: str) -> str:
    """The screen line holding ``value``, without the section's border."""
    for line in screen_text(app):
        if value in line:
            return line.strip(" │")
    raise AssertionError(f"{value!r} is not on screen:\n" + "\n".join(screen_text(app)))


async def test_the_workflows_pane_is_hidden_while_there_is_no_workflow(
    dashboard: Dashboard,
) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        assert app.snapshot is not None and app.snapshot.workflows == []
        assert not app.workflows_pane.has_class("-visible")
        assert not app.workflows_pane.display


async def test_a_running_workflow_shows_its_steps_by_status_then_ends_and_leaves(
    dashboard: Dashboard,
) -> None:
    backend = dashboard.backend
    run = await diamond_under_way(backend)
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        assert app.workflows_pane.display
        assert app.workflows_pane.border_title == "Workflows · 1 running"
        assert app.workflows_table.full_ids  # 180 columns: the whole id fits
        assert app.workflows_table.labels == [
            "workflow", "name", "status", "", "ended", "waiting", "due", "running", "failed",
            "cancelled", "age",
        ]  # fmt: skip
        shown = rows(app.workflows_table)[str(run.id)]
        assert shown[1:3] == ["nightly-etl", "running"]
        assert shown[3] == "██" + "░" * 8  # 1 of 5 ended
        assert shown[4:10] == ["1/5", "2", "1", "1", "0", "0"]
        # t1 fails for good: load is cancelled, report (finished) is released.
        job = await backend.get(run.jobs["t1"])
        assert job is not None
        await backend.mark_failed_or_retry(job.lease(), ERROR, None)
        await backend.release_workflow_steps([job.id])
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert rows(app.workflows_table)[str(run.id)][4:10] == ["3/5", "0", "2", "0", "1", "1"]
        await run_step(backend, run, "t2")
        await run_step(backend, run, "report")
        await pilot.press("ctrl+r")
        await settle(pilot)
        # Ended within the window: still listed, as failed.
        assert app.workflows_pane.border_title == "Workflows · 0 running · 1 ended lately"
        assert rows(app.workflows_table)[str(run.id)][2:5] == ["failed", "█" * 10, "5/5"]
        dashboard.clock.advance(timedelta(hours=2))  # past the dashboard's window
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert not app.workflows_pane.display


async def test_the_title_says_when_more_workflows_run_than_shown(dashboard: Dashboard) -> None:
    for queue in ("one", "two", "three"):
        await make_diamond(dashboard.backend, name=queue, queue=queue)
        dashboard.clock.advance(1)
    done = await make_diamond(dashboard.backend, name="done", queue="four")
    await run_all(dashboard.backend, done)
    source = BackendSource(
        dashboard.backend, "db", "public", settings=DashboardSettings(workflows_limit=2)
    )
    app = top_app(source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        # The newest running ones; the one that ended has no room.
        assert [cells[1] for cells in rows(app.workflows_table).values()] == ["three", "two"]
        assert app.workflows_pane.border_title == (
            "Workflows · newest 2 of more running · taskq workflows list"
        )


async def test_a_waiting_step_names_its_workflow_and_dependencies_in_detail_and_explain(
    dashboard: Dashboard,
) -> None:
    backend = dashboard.backend
    run = await diamond_under_way(backend)
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        app.post_message(JobChosen(run.jobs["load"]))
        await settle(pilot)
        assert isinstance(app.screen, JobDetailScreen)
        assert on_screen(app, "step load of workflow").split() == [
            "origin", "step", "load", "of", "workflow", str(run.id),
        ]  # fmt: skip
        assert " ".join(on_screen(app, "nightly-etl: running").split()) == (
            "workflow nightly-etl: running, 1 of 5 steps ended"
        )
        assert on_screen(app, "t1 (running)").split()[:6] == [
            "waits", "for", "t1", "(running),", "t2", "(pending);",
        ]  # fmt: skip
        await pilot.press("e")
        await settle(pilot)
        assert isinstance(app.screen, ExplainScreen)
        assert app.screen.explanation.verdict.code == "workflow_dependencies"
        line = " ".join(on_screen(app, "blocked:").split())
        assert line.startswith("blocked: it is a workflow step that waits for t1 (running)")
