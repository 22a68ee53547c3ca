"""The real ``taskq top`` in a real terminal: it draws the panes, and ``q`` or Ctrl-C exits 0."""

from __future__ import annotations

import pexpect
import pytest

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
