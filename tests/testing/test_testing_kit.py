"""``taskq_core.testing``: an application's jobs tested with no server and no worker process,
on a clock the test moves. The example actors (``examples/actors.py``) are its subjects."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from examples.actors import Flaky, Report, Resize, build_report, charge_card, flaky_upload, resize
from examples.actors import registry as example_registry
from taskq_core import JobContext, actor
from taskq_core.di import ProviderRegistry, Scope
from taskq_core.statemachine import JobStatus
from taskq_core.testing import (
    FakeClock,
    assert_enqueued,
    drain,
    inline_client,
    perform,
    refute_enqueued,
)

DOC = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()


async def test_drain_runs_every_due_job_and_counts_outcomes() -> None:
    async with inline_client(registry=example_registry) as client:
        ok = await client.enqueue(resize, Resize(url="a.png", width=100))
        report = await client.enqueue(build_report, Report(name="q4"))
        declined = await client.enqueue(charge_card, {"amount_cents": 500})
        counts = await drain(client, example_registry)
        assert (counts["succeeded"], counts["failed"], counts["retried"]) == (2, 1, 0)
        rows = {job.id: await client.get(job.id) for job in (ok, report, declined)}
        assert {job_id: row.status for job_id, row in rows.items() if row} == {
            ok.id: JobStatus.SUCCEEDED,
            report.id: JobStatus.SUCCEEDED,  # a plain ``def`` actor, in its thread
            declined.id: JobStatus.FAILED,
        }
        assert rows[ok.id] is not None and rows[ok.id].result == {  # type: ignore[union-attr]
            "url": "a.png", "width": 100, "attempt": 1,
        }  # fmt: skip


async def test_a_retry_waits_for_the_clock_the_test_moves() -> None:
    clock = FakeClock()
    async with inline_client(registry=example_registry, clock=clock) as client:
        job = await client.enqueue(flaky_upload, Flaky(succeed_on=2))
        first = await drain(client, example_registry)
        assert (first["retried"], first["succeeded"]) == (1, 0)
        row = await client.get(job.id)
        assert row is not None and row.status is JobStatus.SCHEDULED
        assert_enqueued(client, flaky_upload, Flaky(succeed_on=2))

        clock.advance(timedelta(minutes=1))
        second = await drain(client, example_registry)
        assert second["succeeded"] == 1
        row = await client.get(job.id)
        assert row is not None and (row.status, row.result) == (
            JobStatus.SUCCEEDED, "uploaded on attempt 2",
        )  # fmt: skip
        refute_enqueued(client, flaky_upload)


async def test_a_delayed_job_is_not_due_until_its_time() -> None:
    clock = FakeClock()
    async with inline_client(registry=example_registry, clock=clock) as client:
        await client.enqueue(resize, Resize(url="b.png", width=5), delay=timedelta(hours=1))
        assert (await drain(client, example_registry))["succeeded"] == 0
        clock.advance(timedelta(hours=1))
        assert (await drain(client, example_registry))["succeeded"] == 1


@actor(queue="fanout")
async def fan_out(payload: dict[str, int], ctx: JobContext[dict[str, int]]) -> None:
    if payload["left"]:
        await _client[0].enqueue(fan_out, {"left": payload["left"] - 1})


_client: list[Any] = []


async def test_jobs_the_bodies_enqueue_run_in_the_same_drain() -> None:
    async with inline_client(registry=[fan_out]) as client:
        _client[:] = [client]
        await client.enqueue(fan_out, {"left": 3})
        assert (await drain(client, [fan_out]))["succeeded"] == 4


async def test_assert_enqueued_matches_payload_and_fields_and_says_what_waits() -> None:
    async with inline_client(registry=example_registry) as client:
        await client.enqueue(build_report, Report(name="q1"), priority=5)
        row = assert_enqueued(client, build_report, Report(name="q1"), queue="reports")
        assert row.priority == 5
        assert_enqueued(client, "build_report", {"name": "q1"})
        with pytest.raises(AssertionError, match=r"waiting: build_report\(\{'name': 'q1'\}"):
            assert_enqueued(client, build_report, Report(name="q2"))
        with pytest.raises(AssertionError, match="1 waiting build_report job"):
            refute_enqueued(client, build_report, priority=5)
        refute_enqueued(client, build_report, queue="default")
        refute_enqueued(client, resize)


async def test_perform_runs_one_body_with_a_real_context() -> None:
    assert await perform(resize, {"url": "c.png", "width": 7}, attempt=3) == {
        "url": "c.png", "width": 7, "attempt": 3,
    }  # fmt: skip
    assert await perform(build_report, Report(name="x")) == {"report": "x", "status": "built"}
    with pytest.raises(ValueError, match="declined for 9 cents"):
        await perform(charge_card, {"amount_cents": 9})


class Greeting:
    def __init__(self) -> None:
        self.word = "hello"


@actor
async def greet(payload: dict[str, str], greeting: Greeting) -> str:
    return f"{greeting.word} {payload['name']}"


async def test_perform_resolves_dependencies_from_providers() -> None:
    providers = ProviderRegistry()
    providers.register(Greeting, Greeting, scope=Scope.TRANSIENT)
    assert await perform(greet, {"name": "ada"}, providers=providers) == "hello ada"


async def test_the_documented_example_runs() -> None:
    """docs/testing.md's example, run as written."""
    (code,) = re.findall(r"```python\n(.*?)```", DOC, flags=re.DOTALL)
    namespace: dict[str, Any] = {"__name__": "docs_testing_example"}
    exec(compile(code, "docs/testing.md", "exec"), namespace)
    tests = [value for name, value in namespace.items() if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        await test()


@actor(queue="wf_kit")
async def kit_step(payload: dict[str, Any], ctx: JobContext[Any]) -> int:
    return int(payload["n"]) + sum(up.result for up in ctx.upstream.values())


async def test_drain_runs_a_workflow_step_after_step() -> None:
    from taskq_core import Workflow
    from taskq_core.backend.protocol.workflows import WorkflowStatus

    wf = Workflow("kit")
    first = wf.add(kit_step, {"n": 1}, name="first")
    second = wf.add(kit_step, {"n": 10}, name="second", after=[first])
    wf.add(kit_step, {"n": 100}, name="third", after=[first, second])
    async with inline_client(registry=[kit_step]) as client:
        run = await client.enqueue_workflow(wf)
        counts = await drain(client, [kit_step])
        assert counts["succeeded"] == 3
        third = await client.get(run.jobs["third"])
        assert third is not None and third.result == 100 + 1 + 11
        ended = await client.get_workflow(run.id)
        assert ended is not None and ended.status is WorkflowStatus.SUCCEEDED


async def test_a_step_waits_for_a_whole_group_of_mapped_steps() -> None:
    from taskq_core import Workflow

    wf = Workflow()
    root = wf.add(kit_step, {"n": 0}, name="root")
    group = wf.add_many(kit_step, [{"n": n} for n in (1, 2, 3)], name="part", after=root)
    wf.add(kit_step, {"n": 1000}, name="sum", after=[group, root])
    assert [step.name for step in group] == ["part[0]", "part[1]", "part[2]"]
    async with inline_client(registry=[kit_step]) as client:
        run = await client.enqueue_workflow(wf)
        await drain(client, [kit_step])
        steps = {step.name: step for step in await client.workflow_steps(run.id)}
        total = await client.get(run.jobs["sum"])
    assert set(steps["sum"].after) == {"root", "part[0]", "part[1]", "part[2]"}
    assert total is not None and total.result == 1000 + (1 + 2 + 3) + 0
