"""The real ``taskq top`` in a real terminal: it draws the panes, ``q`` or Ctrl-C exits 0, and
``p`` records a pause with the reason typed."""

from __future__ import annotations

import pexpect
import pytest

from taskq_cli.operator import operator_id as operator
from taskq_core.backend.postgres.backend import PostgresBackend
from tests.conftest import TASKQ_BIN, PgTarget
from tests.tui.seed import SeededDashboard

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]


async def test_taskq_top_draws_the_dashboard_and_q_exits_0(
    pg: PgTarget, seeded_pg: tuple[PostgresBackend, SeededDashboard]
) -> None:
    env = pg.env(TERM="xterm-256color", COLUMNS="120", LINES="40")
    child = pexpect.spawn(
        TASKQ_BIN, ["top", "--refresh", "0.5"], env=env, dimensions=(40, 120), timeout=30
    )
    # The pane titles are painted once, before or after the first refresh's rows: wait for
    # each piece in whatever order the terminal receives them.
    needles = [
        "webhooks",  # the last queue row: the queues pane is drawn
        "Workers",
        "media-1",  # the leader's row in the workers pane
    ]
    seen: set[str] = set()
    try:
        while len(seen) < len(needles):
            seen.add(needles[child.expect(needles)])
        child.send("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, (child.exitstatus, child.signalstatus)


async def test_ctrl_c_quits_taskq_top_with_exit_code_0(
    pg: PgTarget, seeded_pg: tuple[PostgresBackend, SeededDashboard]
) -> None:
    env = pg.env(TERM="xterm-256color", COLUMNS="80", LINES="24")
    child = pexpect.spawn(
        TASKQ_BIN, ["top", "--refresh", "0.5"], env=env, dimensions=(24, 80), timeout=30
    )
    try:
        child.expect("webhooks")  # a queue row: the dashboard runs and has refreshed
        child.send("\x03")  # Ctrl-C, as the terminal sends it in raw mode
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, (child.exitstatus, child.signalstatus)
    assert b"Traceback" not in (child.before or b"")


async def test_p_asks_why_and_records_the_pause_with_its_reason(
    pg: PgTarget, seeded_pg: tuple[PostgresBackend, SeededDashboard]
) -> None:
    backend, _ = seeded_pg
    env = pg.env(TERM="xterm-256color", COLUMNS="120", LINES="40")
    child = pexpect.spawn(
        TASKQ_BIN, ["top", "--refresh", "0.5"], env=env, dimensions=(40, 120), timeout=30
    )
    try:
        child.expect("Recent failures")  # the jobs pane has focus, on the newest failure
        child.expect("webhooks")
        child.send("p")
        child.expect("Pause queue")
        child.send("smtp down")  # y and n among the letters: typed, not answers
        child.send("\r")
        child.expect(r"queue '(\w+)' paused")
        queue = (child.match.group(1) if child.match else b"").decode()
        child.send("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, (child.exitstatus, child.signalstatus)
    row = await backend.get_queue(queue)
    assert row is not None and row.paused and row.pause is not None
    assert (row.pause.paused_by, row.pause.reason) == (operator(), "smtp down")
