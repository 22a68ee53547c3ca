"""taskq top's detail screen shows the progress a running job's actor last reported."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from taskq_cli.dashboard.source import BackendSource
from taskq_cli.tui.widgets.job_detail import JobDetailScreen
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs, Start
from taskq_core.clock import FakeClock
from taskq_core.progress import ProgressReport
from tests.tui.conftest import SIZE, settle, top_app
from tests.tui.test_top_app import field

LEASE = timedelta(seconds=60)


async def test_the_detail_screen_shows_the_reported_progress() -> None:
    clock = FakeClock()
    backend = InMemoryBackend(clock=clock)
    job = await backend.enqueue(EnqueueArgs("resize", queue="media"))
    worker = uuid4()
    [claimed] = await backend.dispatch_batch(worker, ["media"], 1, LEASE)
    await backend.mark_started_many(worker, [Start(job.id, claimed.attempt)])
    report = ProgressReport(job.id, 4, 40, 160, "resizing thumbnails", clock.now())
    assert await backend.write_progress(claimed.lease(), report.seq, report.state())
    source = BackendSource(backend, database="localhost:5432/taskq", schema="public")
    app = top_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        detail = await source.job_detail(job.id)
        assert detail is not None
        await app.push_screen(JobDetailScreen(detail))
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, JobDetailScreen) and screen.job_id == job.id
        shown = field(str(screen.query_one("#detail-fields").render()), "progress")
        assert shown.startswith("[#####---------------]  25% (40/160) resizing thumbnails"), shown
    await backend.close()
