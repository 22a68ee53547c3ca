"""Batches in `taskq top`: the batches pane lists active batches with their progress and hides
while none is active; the job detail of a child names its batch, a finalizer's the batch it
finalizes. Batches are made through the backend (tests/batch_seed.py)."""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable

from taskq_cli.dashboard.source import BackendSource, DashboardSettings
from taskq_cli.tui.messages import JobChosen
from taskq_cli.tui.widgets.job_detail import JobDetailScreen
from tests.batch_seed import make_batch, settle_child
from tests.tui.conftest import WIDE, Dashboard, screen_text, settle, top_app


def rows(table: DataTable[Any]) -> dict[str, list[str]]:
    return {
        str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)]
        for i in range(table.row_count)
    }


def field_line(app: Any, value: str) -> str:
    """The detail screen's field line holding ``value``, without the section's border."""
    for line in screen_text(app):
        if value in line:
            return line.strip(" │")
    raise AssertionError(f"{value!r} is not on screen:\n" + "\n".join(screen_text(app)))


async def test_the_batches_pane_is_hidden_while_no_batch_is_active(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        assert app.snapshot is not None and app.snapshot.batches == []
        assert not app.batches_pane.has_class("-visible")
        assert not app.batches_pane.display


async def test_an_active_batch_shows_its_progress_then_hides_when_it_completes(
    dashboard: Dashboard,
) -> None:
    backend = dashboard.backend
    batch = await make_batch(backend, size=4, threshold=3)
    await settle_child(backend, batch, "succeeded")
    await settle_child(backend, batch, "failed")
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        assert app.batches_pane.display
        assert app.batches_pane.border_title == "Batches · 1 active"
        assert app.batches_table.full_ids  # 180 columns: the whole id fits
        shown = rows(app.batches_table)[str(batch.id)]
        assert shown[1] == "batchq"
        assert shown[2] == "█" * 5 + "░" * 5  # 2 of 4 done
        assert shown[3:8] == ["2/4", "1", "0", "1/3", "notify_done"]
        await settle_child(backend, batch, "succeeded")
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert rows(app.batches_table)[str(batch.id)][3:7] == ["3/4", "1", "0", "0/3"]
        _, transitions = await settle_child(backend, batch, "succeeded")
        assert [t.status.value for t in transitions] == ["complete"]
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert not app.batches_pane.display


async def test_the_pane_title_says_when_more_batches_are_active_than_shown(
    dashboard: Dashboard,
) -> None:
    for queue in ("one", "two", "three"):
        await make_batch(dashboard.backend, queue=queue, size=1, finalizer=None)
        dashboard.clock.advance(1)
    source = BackendSource(
        dashboard.backend, "db", "public", settings=DashboardSettings(batches_limit=2)
    )
    app = top_app(source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        assert app.batches_table.row_count == 2
        assert str(app.batches_pane.border_title).startswith("Batches · newest 2 of more active")
        # The newest first.
        assert [cells[1] for cells in rows(app.batches_table).values()] == ["three", "two"]


async def test_a_child_and_the_finalizer_name_their_batch_in_the_job_detail(
    dashboard: Dashboard,
) -> None:
    backend = dashboard.backend
    batch = await make_batch(backend, size=2)
    failed, _ = await settle_child(backend, batch, "failed")
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        app.post_message(JobChosen(failed.id))
        await settle(pilot)
        assert isinstance(app.screen, JobDetailScreen)
        assert field_line(app, f"{batch.id}: active, 1 of 2 done (1 failed)").startswith("batch ")
        await pilot.press("escape")
        await settle_child(backend, batch, "succeeded")
        assert batch.finalizer_job_id is not None
        assert await backend.get(batch.finalizer_job_id) is not None  # enqueued as it ended
        app.post_message(JobChosen(batch.finalizer_job_id))
        await settle(pilot)
        line = field_line(app, f"finalizer of batch {batch.id}: complete, 2 of 2 done (1 failed)")
        assert line.startswith("batch ")
