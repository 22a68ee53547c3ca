"""``a`` on the workers pane acknowledges a stale worker's silence; the alert goes, who did it
is recorded, and a worker that is not stale is refused."""

from __future__ import annotations

from datetime import timedelta

from taskq_cli.operator import operator_id
from taskq_cli.tui.widgets.confirm import ConfirmScreen
from taskq_cli.ui.alerts import alerts
from tests.tui.conftest import WIDE, Dashboard, settle, top_app
from tests.tui.test_top_app import column, select_row


async def test_a_acknowledges_the_selected_stale_worker_after_confirmation(
    dashboard: Dashboard,
) -> None:
    silent = dashboard.seeded.silent
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        assert app.snapshot is not None
        assert [a.kind for a in alerts(app.snapshot)].count("stale_worker") == 1
        app.workers_table.focus()
        await select_row(app.workers_table, str(silent))

        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question == (
            "Acknowledge the silence of stale worker reports-1 (node-c:4303)?"
        )
        await pilot.press("n")  # backing out writes nothing
        await settle(pilot)
        assert (await dashboard.backend.list_operator_log(action="worker_ack")) == []

        await pilot.press("a")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        [row] = [w for w in await dashboard.backend.list_workers() if w.id == silent]
        assert row.acknowledged_by == operator_id()
        [entry] = await dashboard.backend.list_operator_log(action="worker_ack")
        assert (entry.target, entry.by) == (str(silent), operator_id())
        # The refresh after it: no alert, and the pane says it was acknowledged.
        assert app.snapshot is not None
        assert "stale_worker" not in [a.kind for a in alerts(app.snapshot)]
        assert "stale, acked" in column(app.workers_table, "state")


async def test_a_on_a_running_worker_is_refused_without_asking(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        app.workers_table.focus()
        await select_row(app.workers_table, str(dashboard.seeded.busy))
        await pilot.press("a")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("running: no alert" in str(n.message) for n in app._notifications)
        assert (await dashboard.backend.list_operator_log(action="worker_ack")) == []


async def test_the_alert_clears_itself_once_the_cleanup_deletes_the_row(
    dashboard: Dashboard,
) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        assert app.snapshot is not None
        assert "stale_worker" in [a.kind for a in alerts(app.snapshot)]
        dashboard.clock.advance(2 * 86400)  # a day's silence and more, every job reclaimed
        await dashboard.backend.reclaim_expired_leases(
            cancel_grace=timedelta(0),
            cleanup_grace=timedelta(0),
        )
        assert await dashboard.backend.delete_stale_workers(timedelta(days=1))
        await app.run_action("refresh_now")
        await settle(pilot)
        assert app.snapshot is not None
        assert "stale_worker" not in [a.kind for a in alerts(app.snapshot)]
        assert str(dashboard.seeded.silent) not in app.workers_table.views
