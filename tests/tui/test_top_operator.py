"""What an operator hunting a stuck queue does in ``taskq top``, on a seeded PostgreSQL schema:
pause the queue of the job they are looking at, ask why a job waits, copy its id, read an
80x24 terminal, and browse a jobs list that does not move under the cursor."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from taskq_cli.dashboard.source import BackendSource
from taskq_cli.operator import operator_id as operator
from taskq_cli.tui.widgets.confirm import ConfirmScreen, ReasonScreen
from taskq_cli.tui.widgets.explain import ExplainScreen
from taskq_cli.tui.widgets.job_detail import JobDetailScreen
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import Start
from tests.conftest import PgTarget
from tests.tui.conftest import SIZE, screen_text, settle, top_app
from tests.tui.seed import LEASE, SeededDashboard
from tests.tui.test_top_app import _filter, by_first_column, cells, select_row, why

pytestmark = pytest.mark.postgres

Seeded = tuple[PostgresBackend, SeededDashboard]


async def test_p_in_the_jobs_pane_pauses_the_selected_jobs_queue_then_e_says_so(
    pg: PgTarget, seeded_pg: Seeded
) -> None:
    backend, _ = seeded_pg
    app = top_app(BackendSource(backend, database="test", schema=pg.schema))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await select_row(app.queues_table, "webhooks")  # another queue's row is selected there
        await _filter(pilot, "queue=emails status=pending")
        job = app.jobs_pane.table.selected
        assert job is not None and job.queue == "emails"
        assert app.focused is app.jobs_pane.table

        await pilot.press("p")
        await settle(pilot)
        assert isinstance(app.screen, ReasonScreen)
        assert app.screen.question.startswith("Pause queue 'emails' (the queue of job ")
        await pilot.press(*"smtp down", "enter")
        await settle(pilot)
        emails, webhooks = await backend.get_queue("emails"), await backend.get_queue("webhooks")
        assert emails is not None and emails.paused
        assert webhooks is not None and not webhooks.paused
        # Recorded with who (this terminal's user@host) and why, and shown in the why column.
        assert emails.pause is not None and emails.pause.reason == "smtp down"
        assert emails.pause.paused_by == operator()
        note = why(app.queues_table, "emails")
        assert re.fullmatch(rf"paused \d+s by {re.escape(operator())}: smtp down", note), note

        await pilot.press("e")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ExplainScreen)
        assert screen.explanation.job.id == job.id
        assert screen.explanation.verdict.code == "queue_paused"
        text = str(screen.query_one("#explain-text").render())
        assert f"job {job.id}" in text
        assert re.search(
            rf"blocked: queue 'emails' is paused, \S+ ago by {re.escape(operator())}: smtp down "
            r"\(taskq queues resume emails lets it run\)",
            text,
        )
        assert "BLOCKS queue_paused" in text and "ok     deadline" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, ExplainScreen)


async def test_the_workers_pane_p_pauses_nothing(pg: PgTarget, seeded_pg: Seeded) -> None:
    backend, _ = seeded_pg
    app = top_app(BackendSource(backend, database="test", schema=pg.schema))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.workers_table.focus()
        await pilot.press("p")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen | ReasonScreen)
        assert any("select a queue or a job" in n.message for n in app._notifications)
        assert not any(q.paused for q in app.queues_table.queues.values() if q.name != "reports")


async def test_y_copies_the_whole_id_and_e_works_from_the_detail_screen(
    pg: PgTarget, seeded_pg: Seeded
) -> None:
    backend, _ = seeded_pg
    app = top_app(BackendSource(backend, database="test", schema=pg.schema))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        job = app.jobs_pane.table.selected
        assert job is not None
        await pilot.press("y")
        assert app.clipboard == str(job.id)
        assert any(n.message == str(job.id) for n in app._notifications)

        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, JobDetailScreen)
        await pilot.press("e")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ExplainScreen)
        assert screen.explanation.situation == "terminal"
        assert str(screen.query_one("#explain-text").render()).count("finished: ") == 1


async def test_80x24_shows_every_queue_and_worker_with_whole_numbers_and_usable_ids(
    pg: PgTarget, seeded_pg: Seeded
) -> None:
    backend, seeded = seeded_pg
    app = top_app(BackendSource(backend, database="test", schema=pg.schema))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        lines = screen_text(app)
        assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
        firsts = [line[2:].split(" ", 1)[0] for line in lines if line.startswith("│ ")]
        for queue in ("emails", "media", "reports", "webhooks"):
            assert queue in firsts, lines
        for label in ("emails-1", "media-1", "reports-1"):
            assert any(f" {label} " in line for line in lines), lines
        queues = next(i for i, line in enumerate(lines) if "─ Queues " in line)
        rows = {line.split()[1]: line.split()[1:-1] for line in lines[queues + 2 : queues + 6]}
        labels = app.queues_table.labels
        media = [rows["media"][labels.index(name)] for name in ("pending", "running")]
        assert media == ["42", "3"]  # whole numbers, on screen
        # Only free text is cut: the pause note in the why column (resuming shows it whole).
        cut = [line for line in lines[queues : queues + 6] if "…" in line]
        assert all(" paused " in line and line.count("…") == 1 for line in cut), cut
        # No horizontal scrolling: every shown column fits.
        for table in (app.queues_table, app.workers_table, app.jobs_pane.table):
            assert table.virtual_size.width <= table.size.width, table.id
        # The jobs pane shows the ids' 12-digit suffixes; the whole id is one key away.
        assert not app.jobs_pane.table.full_ids
        for failed in seeded.failed:
            assert any(failed.id.hex[-12:] in line for line in lines), lines


async def test_the_jobs_pane_holds_its_order_while_the_operator_browses(
    pg: PgTarget, seeded_pg: Seeded
) -> None:
    backend, seeded = seeded_pg
    app = top_app(BackendSource(backend, database="test", schema=pg.schema))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await _filter(pilot, "queue=emails status=all")
        table = app.jobs_pane.table
        before = [row.key.value for row in table.ordered_rows]
        await pilot.press("down", "down")
        held = table.selected
        assert held is not None and table.cursor_row == 2
        line = table.cursor_row - round(table.scroll_y)

        # The oldest pending email starts running: newest activity, so the source now
        # lists it first.
        claimed = await backend.dispatch_batch(seeded.busy, ["emails"], 1, LEASE)
        assert await backend.mark_started_many(seeded.busy, [Start(claimed[0].id, 1)])
        moved = str(claimed[0].id)
        assert before.index(moved) > 2
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert [row.key.value for row in table.ordered_rows] == before
        assert table.selected is not None and table.selected.id == held.id
        assert table.cursor_row - round(table.scroll_y) == line
        assert cells(table)[before.index(moved)][3] == "running"

        # Back on the first row, the list follows the source's order again.
        table.move_cursor(row=0)
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert table.ordered_rows[0].key.value == moved


async def test_the_why_column_names_what_holds_old_pending_work(
    pg: PgTarget, seeded_pg: Seeded
) -> None:
    backend, seeded = seeded_pg
    app = top_app(BackendSource(backend, database="test", schema=pg.schema))
    async with app.run_test(size=(180, 40)) as pilot:
        await settle(pilot)
        assert by_first_column(app.queues_table)["media"][7] == ""  # nothing waits long
        # Make the media backlog old (on the database's clock) and cap the queue.
        conn = await backend._pool.acquire()
        try:
            await conn.execute(
                f"UPDATE {pg.schema}.jobs SET scheduled_at = scheduled_at - $1::interval "
                "WHERE queue = 'media' AND status = 'pending'",
                timedelta(minutes=5),
            )
        finally:
            await backend._pool.release(conn)
        await backend.update_queue("media", max_concurrent=3)
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert by_first_column(app.queues_table)["media"][7] == "max_concurrent 3 full"

        await backend.update_queue("media", max_concurrent=None)
        await pilot.press("ctrl+r")
        await settle(pilot)
        # Both media consumers are alive with free slots: the blocker is per job.
        assert by_first_column(app.queues_table)["media"][7] == "per job (e)"

        for worker in (seeded.leader, seeded.busy):
            await backend.mark_worker_stopped(worker)
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert by_first_column(app.queues_table)["media"][7] == "no live worker"
