"""TopApp on a seeded PostgreSQL schema: the panes read the real dashboard queries, an
action changes the database, and a database that goes away and comes back is survived."""

from __future__ import annotations

import re

import pytest

from taskq_cli.dashboard.source import BackendSource
from taskq_cli.tui.widgets.workers_table import LEADER_MARK
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.statemachine import JobStatus
from tests.conftest import PgTarget
from tests.tui.conftest import SIZE, WIDE, settle, top_app
from tests.tui.proxy import PostgresProxy
from tests.tui.seed import SeededDashboard
from tests.tui.test_top_app import by_first_column, cells, column, select_row

pytestmark = pytest.mark.postgres


async def test_the_panes_show_a_seeded_postgres_schema(
    pg: PgTarget, seeded_pg: tuple[PostgresBackend, SeededDashboard]
) -> None:
    backend, seeded = seeded_pg
    source = BackendSource(backend, database="test", schema=pg.schema)
    app = top_app(source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        assert not app.banner.has_class("-visible")
        queues = by_first_column(app.queues_table)
        assert list(queues) == ["emails", "media", "reports", "webhooks"]
        assert queues["media"][1:5] == ["42", "0", "3", "3"]
        assert queues["reports"][2] == "4"
        # The pause note, on the database's clock: seconds ago, by whom and why.
        assert re.fullmatch(r"paused \d+s by ops@node-a: month-end freeze", queues["reports"][7])
        assert queues["webhooks"][8:10] == ["round_robin", "8"]
        assert queues["emails"][6] != "-"  # it has an oldest pending job

        workers = {row[1]: row for row in cells(app.workers_table)}
        assert workers["media-1"][0] == LEADER_MARK
        assert "reports-0" not in workers  # stopped: hidden until w

        assert sorted(r.key.value for r in app.jobs_pane.table.ordered_rows) == sorted(
            str(j.id) for j in seeded.failed
        )
        summary = str(app.summary.render())
        assert f"schema {pg.schema}" in summary and "pending 48" in summary
        assert "leader media-1 (node-a:4101)" in summary


async def test_actions_change_the_postgres_schema(
    pg: PgTarget, seeded_pg: tuple[PostgresBackend, SeededDashboard]
) -> None:
    backend, seeded = seeded_pg
    app = top_app(BackendSource(backend, database="test", schema=pg.schema))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.queues_table.focus()
        await select_row(app.queues_table, "reports")
        await pilot.press("p", "y")
        await settle(pilot)
        reports = await backend.get_queue("reports")
        assert reports is not None and not reports.paused

        job = app.jobs_pane.table.selected
        assert job is not None
        await pilot.press("r", "y")
        await settle(pilot)
        row = await backend.get(job.id)
        assert row is not None and row.status is JobStatus.PENDING
        assert str(job.id) not in column(app.jobs_pane.table, "job")
        assert len(seeded.failed) - 1 == app.jobs_pane.table.row_count


async def test_a_database_that_goes_away_shows_the_notice_then_recovers(
    pg: PgTarget, seeded_pg: tuple[PostgresBackend, SeededDashboard]
) -> None:
    async with PostgresProxy(pg.dsn) as proxy:
        backend = await PostgresBackend.connect(proxy.dsn, pg.schema, max_size=2)
        try:
            app = top_app(BackendSource(backend, database="proxied", schema=pg.schema))
            async with app.run_test(size=SIZE) as pilot:
                await settle(pilot)
                assert app.queues_table.row_count == 4

                await proxy.stop()
                await pilot.press("ctrl+r")
                await settle(pilot)
                assert app.banner.has_class("-visible")
                assert app.banner.notice.startswith("database unreachable: "), app.banner.notice
                assert app.queues_table.row_count == 4  # the last data stays on screen
                assert app.is_running

                await proxy.start()
                # The pool notices its dead connections on first use; a refresh or two later
                # it has reconnected.
                for _ in range(5):
                    await pilot.press("ctrl+r")
                    await settle(pilot)
                    if not app.banner.has_class("-visible"):
                        break
                assert not app.banner.has_class("-visible"), app.banner.notice
                assert app.queues_table.row_count == 4
        finally:
            await backend.close()
