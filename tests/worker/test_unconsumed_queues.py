"""A worker warns of actors on queues nobody consumes; a workgroup child asks its group.

Every child of a workgroup that splits queues between specs logged
``actors_on_unconsumed_queues`` at each start, though the group as a whole consumes them:
the supervisor now gives each child the group's queues (TASKQ_WORKGROUP_QUEUES).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.worker.runtime import Worker


@actor(queue="reports")
async def report(payload: dict[str, Any]) -> None: ...


@actor(queue="default")
async def send(payload: dict[str, Any]) -> None: ...


async def _start_events(make_worker: Callable[..., Worker], **settings: Any) -> list[str]:
    worker = make_worker(InMemoryBackend(), [report, send], queues=["default"], **settings)
    with capture_logs() as logs:
        assert await asyncio.wait_for(worker.run(), 30) == 0
    return [str(entry["event"]) for entry in logs]


@pytest.mark.parametrize(
    ("settings", "warned"),
    [
        pytest.param({}, True, id="alone: nobody consumes reports"),
        pytest.param({"workgroup_queues": "default,reports"}, False, id="its group does"),
        pytest.param({"workgroup_queues": "default,media"}, True, id="its group does not"),
    ],
)
async def test_the_warning_is_judged_for_the_group(
    make_worker: Callable[..., Worker], settings: dict[str, Any], warned: bool
) -> None:
    events = await _start_events(make_worker, **settings)
    assert "worker_started" in events  # the log was captured at all
    assert ("actors_on_unconsumed_queues" in events) is warned


def test_a_workgroup_gives_each_child_the_groups_queues(tmp_path: Any) -> None:
    from taskq_core.supervisor.plan import build_plan
    from taskq_core.supervisor.schema import load_workgroup

    path = tmp_path / "group.toml"
    path.write_text(
        'actors = "myapp:registry"\n'
        '[[workers]]\nname = "api"\nqueues = ["default"]\n'
        '[[workers]]\nname = "batch"\nqueues = ["reports", "media"]\n'
    )
    plan = build_plan(load_workgroup(path))
    assert {child.env["TASKQ_WORKGROUP_QUEUES"] for child in plan.children} == {
        "default,media,reports"
    }
