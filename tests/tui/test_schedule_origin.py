"""``taskq top`` says a job came from a schedule: on its detail screen and its explain screen."""

from __future__ import annotations

from taskq_cli.tui.widgets.explain import render_explanation
from taskq_cli.tui.widgets.job_detail import _fields
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol import EnqueueArgs
from taskq_core.explain import explain_job

FIRED = {"schedule": "nightly", "fire_time": "2026-12-03T02:00:00+00:00"}


async def test_a_fired_job_names_its_schedule_and_fire_time() -> None:
    backend = InMemoryBackend()
    job = await backend.enqueue(EnqueueArgs("report", {}, metadata=FIRED))
    origin = "from schedule nightly (fire time 2026-12-03T02:00:00+00:00)"
    explained = render_explanation(await explain_job(backend, job.id)).plain
    assert explained.splitlines()[1] == origin
    fields = dict(line.split(maxsplit=1) for line in _fields(job).plain.splitlines())
    assert fields["origin"] == origin


async def test_a_job_run_by_hand_says_so_and_other_jobs_say_nothing() -> None:
    backend = InMemoryBackend()
    manual = await backend.enqueue(
        EnqueueArgs("report", {}, metadata={"schedule": "nightly", "manual": True})
    )
    assert "from schedule nightly (run by hand)" in _fields(manual).plain
    plain = await backend.enqueue(EnqueueArgs("report", {}))
    assert "origin" not in _fields(plain).plain
    assert "from schedule" not in render_explanation(await explain_job(backend, plain.id)).plain
