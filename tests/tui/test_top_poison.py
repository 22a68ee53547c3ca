"""taskq top on a poison job: the detail screen shows why it failed (the PoisonJob error, its
crashed attempts, the reclaim event saying poison) and its explanation names it."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from taskq_cli.dashboard.source import BackendSource
from taskq_cli.tui.widgets.explain import ExplainScreen
from taskq_cli.tui.widgets.job_detail import JobDetailScreen
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs, Start
from taskq_core.clock import FakeClock
from tests.tui.conftest import SIZE, settle, top_app

LEASE = timedelta(seconds=60)
GRACE = timedelta(seconds=5)


async def test_the_detail_and_explain_screens_name_a_poison_job() -> None:
    clock = FakeClock()
    backend = InMemoryBackend(clock=clock)
    job = await backend.enqueue(EnqueueArgs("explode", queue="q", max_attempts=10))
    for _ in range(3):
        worker = uuid4()
        [claimed] = await backend.dispatch_batch(worker, ["q"], 1, LEASE)
        await backend.mark_started_many(worker, [Start(job.id, claimed.attempt)])
        clock.advance(LEASE.total_seconds() + 1)
        await backend.reclaim_expired_leases(GRACE, GRACE)
    app = top_app(BackendSource(backend, database="localhost:5432/taskq", schema="public"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, JobDetailScreen) and screen.job_id == job.id
        outcome = str(screen.query_one("#detail-outcome").render())
        assert "PoisonJob: 3 workers died running it (TASKQ_POISON_RECLAIMS is 3)" in outcome
        assert str(screen.query_one("#detail-attempts").render()).count("crashed") == 3
        events = str(screen.query_one("#detail-events").render())
        assert '"poison": true' in events and "running → failed" in events
        await pilot.press("e")
        await settle(pilot)
        assert isinstance(app.screen, ExplainScreen)
        text = str(app.screen.query_one("#explain-text").render())
        assert "it is a poison job: 3 workers died while running it" in text
    await backend.close()
