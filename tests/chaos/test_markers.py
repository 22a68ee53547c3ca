"""The per-body ledger the chaos runner judges the execution guarantee by: each body's start
is paired with its own end however it ended, and the three questions asked of it (two bodies
at once in one process, a body started after its job ended, an attempt number reused)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from chaos.markers import ENV_VAR, Markers, body
from taskq_core import JobContext


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv(ENV_VAR, str(path))
    return path


def context(job: UUID, let_start_at: float | None = None) -> JobContext[dict[str, int]]:
    ctx: JobContext[dict[str, int]] = JobContext(
        job_id=job, attempt=1, worker_id=uuid4(), actor="a", queue="q", payload={}
    )
    ctx._let_start_at = let_start_at
    return ctx


def write(path: Path, *lines: str) -> Markers:
    path.write_text("".join(f"{line}\n" for line in lines))
    return Markers.read(path)


async def test_every_body_records_how_it_ended(ledger: Path) -> None:
    jobs = [uuid4() for _ in range(4)]
    with body(context(jobs[0])):
        pass
    with body(context(jobs[1])) as mark:
        mark.stopped()
    with pytest.raises(RuntimeError), body(context(jobs[2])):
        raise RuntimeError("boom")

    async def cancelled() -> None:
        with body(context(jobs[3])):
            await asyncio.sleep(60)

    task = asyncio.create_task(cancelled())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    bodies = Markers.read(ledger).bodies()
    assert [(b.job_id, b.ending) for b in bodies] == list(
        zip(jobs, ["done", "stopped", "raised", "cancelled"], strict=True)
    )
    assert all(b.ended is not None and b.ended >= b.started for b in bodies)


def test_a_body_is_dated_from_when_the_worker_let_it_start(ledger: Path) -> None:
    """A process stopped between the worker's lease check and the body's first line resumes
    a body that had begun: its start is the check's time, not the first line's."""
    let_start_at = time.time() - 30
    with body(context(uuid4(), let_start_at)):
        pass
    (dated,) = Markers.read(ledger).bodies()
    assert dated.started == pytest.approx(let_start_at, abs=1e-5)
    assert dated.ended is not None and dated.ended > let_start_at + 29


def test_two_bodies_of_one_attempt_at_once_are_told_apart(ledger: Path) -> None:
    job = uuid4()
    with body(context(job)), body(context(job)):
        time.sleep(0.001)  # the two ends are stamped after both starts, a tick apart at least
    markers = Markers.read(ledger)
    first, second = markers.bodies()
    assert first.number != second.number
    assert markers.overlapping() == [(first, second)]
    assert markers.attempts_reused() == {(job, 1): [first, second]}


def test_bodies_of_one_job_overlap_only_in_one_process(tmp_path: Path) -> None:
    job = UUID(int=1)
    markers = write(
        tmp_path / "ledger.txt",
        f"start {job} 1 100 1 10.0",
        f"start {job} 2 200 1 10.5",  # another process: allowed to overlap
        f"done {job} 1 100 1 11.0",
        f"start {job} 3 100 2 11.0",  # starts as the first ends: no overlap
        f"done {job} 3 100 2 12.0",
        f"start {job} 4 100 3 11.5",  # while the third runs: overlap
    )
    pairs = [(a.attempt, b.attempt) for a, b in markers.overlapping()]
    assert pairs == [(3, 4)]
    assert markers.in_flight(100) == {job} and markers.in_flight(200) == {job}
    assert markers.attempts_reused() == {}


def test_a_body_started_after_its_job_ended_is_reported(tmp_path: Path) -> None:
    done, other = UUID(int=1), UUID(int=2)
    markers = write(
        tmp_path / "ledger.txt",
        f"start {done} 1 100 1 10.0",
        f"start {done} 2 200 1 12.5",
        f"start {other} 1 100 2 13.0",
        "a torn line",
    )
    late = markers.started_after({done: 12.0})
    assert [(b.pid, at) for b, at in late] == [(200, 12.0)]
