"""TUI fixtures: a seeded in-memory dashboard, the app around it, and a way to let it settle.

Pilot tests run ``TopApp`` on an InMemoryBackend with a FakeClock (fast and deterministic);
the refresh timer is set far out so every refresh a test sees is one it asked for.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from rich.console import Console
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Input

from taskq_cli.dashboard.source import BackendSource, DashboardSource
from taskq_cli.tui.app import TopApp
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.clock import FakeClock
from tests.conftest import PgTarget
from tests.tui.seed import SeededDashboard, seed_dashboard

SIZE = (120, 40)
# Wide enough for every column of every pane.
WIDE = (180, 40)
# Far enough that the interval timer never fires during a test.
NO_TIMER = 3600.0


@dataclass
class Dashboard:
    """A seeded backend, its clock and what the seed created."""

    backend: InMemoryBackend
    clock: FakeClock
    seeded: SeededDashboard
    source: BackendSource


@pytest.fixture(autouse=True)
def _deterministic_terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No cursor blink, and NO_COLOR restored afterwards (Textual pops it from the
    environment when an app starts)."""
    monkeypatch.setattr(Input, "cursor_blink", False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    yield


@pytest.fixture
async def dashboard() -> AsyncIterator[Dashboard]:
    """The seeded state of tests/tui/seed.py on a fresh InMemoryBackend."""
    clock = FakeClock()
    backend = InMemoryBackend(clock=clock)
    seeded = await seed_dashboard(backend, clock.advance)
    source = BackendSource(backend, database="localhost:5432/taskq", schema="public")
    yield Dashboard(backend, clock, seeded, source)
    await backend.close()


@pytest.fixture
async def seeded_pg(pg: PgTarget) -> AsyncIterator[tuple[PostgresBackend, SeededDashboard]]:
    """The seed written to the test's PostgreSQL schema. The backend stays open for the whole
    test: it holds the maintenance leadership the seed took."""
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=3)
    seeded = await seed_dashboard(backend)
    yield backend, seeded
    await backend.close()


def top_app(source: DashboardSource, *, timeout: float = 15.0) -> TopApp:
    """The app as tests drive it: refreshes only when a test asks. The query timeout is
    long: a snapshot's reads on a machine busy with other tests must not count as an
    outage (the tests of the timeout pass their own)."""
    return TopApp(source, refresh=NO_TIMER, timeout=timeout)


async def settle(pilot: Pilot[None]) -> None:
    """Wait for every worker (refresh, detail, action) and the messages they posted."""
    for _ in range(3):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()


def screen_text(app: App[None]) -> list[str]:
    """The lines the terminal shows now, as plain text (what an operator reads)."""
    console = Console(
        width=app.size.width,
        height=app.size.height,
        file=io.StringIO(),
        record=True,
        legacy_windows=False,
        safe_box=False,
    )
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text(styles=False).splitlines()
