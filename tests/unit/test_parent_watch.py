"""ParentWatch: a workgroup child asks for a shutdown once its supervisor is gone."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import structlog

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.settings import TaskqSettings
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.parent import ParentWatch
from taskq_core.worker.runtime import Worker

SUPERVISOR = 4242


def make_deps() -> WorkerDeps:
    """A real WorkerDeps on the memory backend, built the way the worker builds its own."""
    backend = InMemoryBackend()
    settings = TaskqSettings.load(health_enabled=False)
    worker = Worker(settings, {}, backend=backend, install_signal_handlers=False)
    return worker._build_deps(backend)


class FakeParent:
    """``os.getppid`` as the test scripts it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __call__(self) -> int:
        return self.pid


def test_run_once_is_false_while_the_supervisor_is_the_parent() -> None:
    watch = ParentWatch(make_deps(), SUPERVISOR, lambda reason: None, getppid=FakeParent(4242))
    assert watch.run_once() is False


def test_run_once_is_true_once_the_worker_was_reparented() -> None:
    parent = FakeParent(SUPERVISOR)
    watch = ParentWatch(make_deps(), SUPERVISOR, lambda reason: None, getppid=parent)
    parent.pid = 1  # the supervisor died: init (or a subreaper) adopted the worker
    assert watch.run_once() is True


def test_the_real_parent_is_not_gone() -> None:
    assert ParentWatch(make_deps(), os.getppid(), lambda reason: None).run_once() is False


async def test_run_requests_a_shutdown_and_logs_when_the_parent_is_gone() -> None:
    deps = make_deps()
    parent = FakeParent(SUPERVISOR)
    requested: list[str] = []

    def request_shutdown(reason: str) -> None:
        requested.append(reason)
        deps.state.shutdown_event.set()

    watch = ParentWatch(deps, SUPERVISOR, request_shutdown, getppid=parent, interval=0.01)
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(watch.run())
        await _until(lambda: "parent_watch" in deps.liveness.ages())
        assert not requested
        parent.pid = 1
        await asyncio.wait_for(task, 5)
    assert requested == ["supervisor_gone"]
    gone = [e for e in logs if e["event"] == "supervisor_gone"]
    assert gone and gone[0]["log_level"] == "warning" and gone[0]["parent_pid"] == SUPERVISOR
    assert "parent_watch" not in deps.liveness.ages()


async def test_run_waits_for_the_shutdown_it_requested_before_returning() -> None:
    deps = make_deps()
    requested: list[str] = []
    watch = ParentWatch(deps, SUPERVISOR, requested.append, getppid=FakeParent(1), interval=0.01)
    task = asyncio.create_task(watch.run())
    await _until(lambda: bool(requested))
    await asyncio.sleep(0)
    assert not task.done()  # a sibling returning before shutdown would stop the worker
    assert "parent_watch" not in deps.liveness.ages()  # not mistaken for a stalled loop
    deps.state.shutdown_event.set()
    await asyncio.wait_for(task, 5)
    assert requested == ["supervisor_gone"]


async def test_run_ends_on_shutdown_without_requesting_one() -> None:
    deps = make_deps()
    requested: list[str] = []
    watch = ParentWatch(deps, SUPERVISOR, requested.append, getppid=FakeParent(SUPERVISOR))
    task = asyncio.create_task(watch.run())
    await _until(lambda: "parent_watch" in deps.liveness.ages())
    deps.state.shutdown_event.set()
    await asyncio.wait_for(task, 5)
    assert requested == [] and "parent_watch" not in deps.liveness.ages()


async def _until(check: Any, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.005)
