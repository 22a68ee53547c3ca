"""Workflows on every backend: steps with dependencies wait where dispatch never looks, the
release rule (run when every dependency succeeded; cancelled when one failed for good; with
``requires="finished"`` once every one ended), once however many parents end together, the
leader's sweep for a release no hook made, the upstream read and the operators' read of a
step's dependencies, graft, cancel and retry."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from taskq_core.backend.protocol import Backend, JobRow, Start
from taskq_core.backend.protocol.admin import Audit
from taskq_core.backend.protocol.workflows import (
    GATED_DEPENDENCIES,
    WORKFLOW_ID_KEY,
    WORKFLOW_REQUIRES_KEY,
    WORKFLOW_STEP_KEY,
    NewStep,
    NewWorkflow,
    StepDependency,
    WorkflowFilter,
    WorkflowStatus,
    decide_step,
)
from taskq_core.errors import SingletonCollisionError
from taskq_core.ids import uuid7
from taskq_core.statemachine import TERMINAL_STATUSES, JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import BOOM, LEASE, args, new_queue, reload

S = JobStatus


class Graph:
    """A workflow built step by step: ``step(name, after=..., **fields)``; ``create()``."""

    def __init__(self, queue: str | None = None) -> None:
        self.id = uuid7()
        self.queue = queue or new_queue()
        self.steps: list[NewStep] = []
        self.ids: dict[str, UUID] = {}

    def step(
        self, name: str, *, after: tuple[str, ...] = (), requires: str = "succeeded", **fields: Any
    ) -> NewStep:
        metadata: dict[str, Any] = {WORKFLOW_ID_KEY: str(self.id), WORKFLOW_STEP_KEY: name}
        if requires != "succeeded":
            metadata[WORKFLOW_REQUIRES_KEY] = requires
        fields.setdefault("queue", self.queue)
        job_id = self.ids[name] = uuid7()
        new = NewStep(
            args(name, job_id=job_id, metadata=metadata, waiting=bool(after), **fields),
            name,
            tuple(self.ids[parent] for parent in after),
        )
        self.steps.append(new)
        return new

    async def create(self, backend: Backend, name: str | None = "wf") -> list[JobRow]:
        return await backend.create_workflow(NewWorkflow(self.id, name), self.steps)

    async def status(self, backend: Backend, name: str) -> JobStatus:
        return (await reload(backend, self.ids[name])).status


async def run(
    backend: Backend, graph: Graph, name: str, outcome: str = "succeeded", result: Any = None
) -> None:
    """Claim step ``name`` (it must be the queue's only due job), end it with ``outcome``
    and run the hook's release, as a worker does."""
    worker = uuid4()
    claimed = await backend.dispatch_batch(worker, [graph.queue], 1, LEASE)
    assert [row.id for row in claimed] == [graph.ids[name]], f"{name} is not the one due"
    job = claimed[0]
    await backend.mark_started_many(worker, [Start(job.id, job.attempt)])
    lease = job.lease()
    if outcome == "succeeded":
        assert await backend.mark_succeeded(lease, result)
    else:
        assert await backend.mark_failed_or_retry(lease, BOOM, None) is not None
    await backend.release_workflow_steps([job.id])


async def diamond(harness: Harness) -> Graph:
    graph = Graph()
    graph.step("a")
    graph.step("b", after=("a",), retry_kind="non_retryable")
    graph.step("c", after=("a",))
    graph.step("d", after=("b", "c"))
    await graph.create(harness.backend)
    return graph


async def test_a_step_with_dependencies_waits_where_dispatch_never_looks(harness: Harness) -> None:
    backend = harness.backend
    graph = await diamond(harness)
    assert [await graph.status(backend, n) for n in "abcd"] == [S.PENDING, *[S.WAITING] * 3]
    claimed = await backend.dispatch_batch(uuid4(), [graph.queue], 10, LEASE)
    assert [row.id for row in claimed] == [graph.ids["a"]]
    row = await backend.get_workflow(graph.id)
    assert row is not None and row.status is WorkflowStatus.RUNNING and row.name == "wf"
    assert row.counts == {S.RUNNING: 1, S.WAITING: 3}


async def test_the_diamond_releases_after_both_and_a_failure_cancels_the_join(
    harness: Harness,
) -> None:
    backend = harness.backend
    graph = await diamond(harness)
    await run(backend, graph, "a", result={"rows": 3})
    assert [await graph.status(backend, n) for n in "bcd"] == [S.PENDING, S.PENDING, S.WAITING]
    upstream = await backend.get_upstream(graph.ids["b"])
    assert upstream["a"].status is S.SUCCEEDED and upstream["a"].result == {"rows": 3}
    # b fails for good: d is cancelled at once, while c is still due.
    claimed = await backend.dispatch_batch(uuid4(), [graph.queue], 1, LEASE)
    first = claimed[0]
    await backend.mark_started_many(first.locked_by_worker, [Start(first.id, first.attempt)])  # type: ignore[arg-type]
    if first.id == graph.ids["c"]:
        assert await backend.mark_succeeded(first.lease(), None)
        await backend.release_workflow_steps([first.id])
        assert await graph.status(backend, "d") is S.WAITING
        await run(backend, graph, "b", outcome="failed")
    else:
        assert await backend.mark_failed_or_retry(first.lease(), BOOM, None) is not None
        release = await backend.release_workflow_steps([first.id])
        assert release.cancelled == 1
        assert await graph.status(backend, "c") is S.PENDING
        await run(backend, graph, "c")
    d = await reload(backend, graph.ids["d"])
    assert d.status is S.CANCELLED and d.cancel_reason == "dependency b failed"
    row = await backend.get_workflow(graph.ids and graph.id)
    assert row is not None and row.status is WorkflowStatus.FAILED and row.finished_at is not None


async def test_a_finished_step_runs_whatever_its_dependencies_outcome(harness: Harness) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("a", retry_kind="non_retryable")
    graph.step("b", after=("a",))
    graph.step("report", after=("b",), requires="finished")
    await graph.create(backend)
    await run(backend, graph, "a", outcome="failed")
    assert await graph.status(backend, "b") is S.CANCELLED  # the cancel runs down the graph
    assert await graph.status(backend, "report") is S.PENDING
    upstream = await backend.get_upstream(graph.ids["report"])
    assert upstream["b"].status is S.CANCELLED
    await run(backend, graph, "report")
    row = await backend.get_workflow(graph.id)
    assert row is not None and row.status is WorkflowStatus.FAILED


async def test_a_step_s_dependencies_are_read_with_their_statuses_in_name_order(
    harness: Harness,
) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("z")  # added first: its id sorts first, its name last
    graph.step("m", retry_kind="non_retryable")
    graph.step("join", after=("z", "m"))
    await graph.create(backend)
    assert await backend.list_step_dependencies(graph.ids["z"]) == []  # a root
    assert await backend.list_step_dependencies(graph.ids["join"]) == [
        StepDependency("m", graph.ids["m"], S.PENDING),
        StepDependency("z", graph.ids["z"], S.PENDING),
    ]
    claimed = await backend.dispatch_batch(uuid4(), [graph.queue], 1, LEASE)
    await backend.mark_started_many(claimed[0].locked_by_worker, [Start(claimed[0].id, 1)])  # type: ignore[arg-type]
    assert await backend.mark_succeeded(claimed[0].lease(), {"rows": 3})  # no hook ran
    statuses = [dep.status for dep in await backend.list_step_dependencies(graph.ids["join"])]
    assert statuses == [S.PENDING, S.SUCCEEDED]
    plain = await backend.enqueue(args())
    assert await backend.list_step_dependencies(plain.id) == []


async def test_two_parents_ending_together_release_their_step_once(harness: Harness) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("left")
    graph.step("right")
    graph.step("join", after=("left", "right"))
    await graph.create(backend)
    worker = uuid4()
    claimed = await backend.dispatch_batch(worker, [graph.queue], 2, LEASE)
    await backend.mark_started_many(worker, [Start(j.id, j.attempt) for j in claimed])
    for job in claimed:
        assert await backend.mark_succeeded(job.lease(), None)
    releases = await asyncio.gather(
        *(backend.release_workflow_steps([job.id]) for job in claimed),
        backend.release_workflow_steps([job.id for job in claimed]),
    )
    assert sum(r.released for r in releases) == 1
    events = await backend.get_events(graph.ids["join"])
    assert [e.kind for e in events].count("released") == 1
    assert await graph.status(backend, "join") is S.PENDING


async def test_the_leaders_sweep_releases_what_no_hook_did(harness: Harness) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("a")
    graph.step("b", after=("a",))
    await graph.create(backend)
    worker = uuid4()
    [job] = await backend.dispatch_batch(worker, [graph.queue], 1, LEASE)
    await backend.mark_started_many(worker, [Start(job.id, job.attempt)])
    assert await backend.mark_succeeded(job.lease(), None)  # and the worker died: no hook
    assert await graph.status(backend, "b") is S.WAITING
    release = await backend.release_stale_workflow_steps()
    assert release.released == 1
    assert await graph.status(backend, "b") is S.PENDING
    await run(backend, graph, "b")
    assert (await backend.get_workflow(graph.id)).status is WorkflowStatus.SUCCEEDED  # type: ignore[union-attr]


async def test_one_sweep_pass_decides_every_step_on_the_statuses_before_it(
    harness: Harness,
) -> None:
    """Two dependencies of the join failed with no hook run; the sweep cancels b (its own
    dependency failed) and, in the same pass, the join: its reason names the dependency that
    had ended when the pass began, not b, which that pass cancels."""
    backend = harness.backend
    graph = Graph()
    graph.step("a", retry_kind="non_retryable")
    graph.step("b", after=("a",))
    graph.step("x", retry_kind="non_retryable")
    graph.step("join", after=("b", "x"))
    await graph.create(backend)
    worker = uuid4()
    claimed = await backend.dispatch_batch(worker, [graph.queue], 2, LEASE)
    await backend.mark_started_many(worker, [Start(job.id, job.attempt) for job in claimed])
    for job in claimed:  # both fail for good, and their worker dies before its hook
        assert await backend.mark_failed_or_retry(job.lease(), BOOM, None) is not None
    release = await backend.release_stale_workflow_steps()
    assert (release.released, release.cancelled) == (0, 2)
    join = await reload(backend, graph.ids["join"])
    assert join.status is S.CANCELLED and join.cancel_reason == "dependency x failed"


async def test_a_released_step_whose_start_is_ahead_is_scheduled(harness: Harness) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("a")
    graph.step("later", after=("a",), delay=timedelta(hours=1))
    await graph.create(backend)
    await run(backend, graph, "a")
    later = await reload(backend, graph.ids["later"])
    assert later.status is S.SCHEDULED
    assert later.scheduled_at - later.created_at >= timedelta(minutes=59)


async def test_cancel_ends_waiting_steps_at_once_and_asks_running_ones(harness: Harness) -> None:
    backend = harness.backend
    graph = await diamond(harness)
    worker = uuid4()
    [a] = await backend.dispatch_batch(worker, [graph.queue], 1, LEASE)
    await backend.mark_started_many(worker, [Start(a.id, a.attempt)])
    cancel = await backend.cancel_workflow(graph.id, "stop")
    assert (cancel.cancelled, cancel.stopping) == (3, 1)
    assert (await backend.get_workflow(graph.id)).status is WorkflowStatus.RUNNING  # type: ignore[union-attr]
    assert await backend.mark_cancelled(a.lease())
    await backend.release_workflow_steps([a.id])
    row = await backend.get_workflow(graph.id)
    assert row is not None and row.status is WorkflowStatus.CANCELLED
    with pytest.raises(ValueError):
        await backend.cancel_workflow(uuid7())


async def test_retry_runs_the_failed_step_again_and_then_its_dependents(harness: Harness) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("a", retry_kind="non_retryable")
    graph.step("b", after=("a",))
    graph.step("c", after=("b",))
    await graph.create(backend)
    await run(backend, graph, "a", outcome="failed")
    assert (await backend.get_workflow(graph.id)).status is WorkflowStatus.FAILED  # type: ignore[union-attr]
    assert await backend.retry_workflow(graph.id) == 3
    assert [await graph.status(backend, n) for n in "abc"] == [S.PENDING, S.WAITING, S.WAITING]
    assert (await backend.get_workflow(graph.id)).status is WorkflowStatus.RUNNING  # type: ignore[union-attr]
    await run(backend, graph, "a")
    await run(backend, graph, "b")
    await run(backend, graph, "c")
    row = await backend.get_workflow(graph.id)
    assert row is not None and row.status is WorkflowStatus.SUCCEEDED


async def test_a_retry_holds_back_a_finished_step_released_on_the_failure(
    harness: Harness,
) -> None:
    """A report step released when its dependency failed, and not run yet, waits again when
    the workflow retries that dependency: it never runs beside it, and reads its new end."""
    backend = harness.backend
    graph = Graph()
    graph.step("a", retry_kind="non_retryable")
    graph.step("report", after=("a",), requires="finished")
    await graph.create(backend)
    await run(backend, graph, "a", outcome="failed")
    assert await graph.status(backend, "report") is S.PENDING
    assert await backend.retry_workflow(graph.id) == 1
    assert await graph.status(backend, "report") is S.WAITING
    await run(backend, graph, "a")  # the only due step: the report waits for it
    upstream = await backend.get_upstream(graph.ids["report"])
    assert upstream["a"].status is S.SUCCEEDED
    await run(backend, graph, "report")
    events = await backend.get_events(graph.ids["report"])
    assert [e.kind for e in events].count("released") == 2
    assert (await backend.get_workflow(graph.id)).status is WorkflowStatus.SUCCEEDED  # type: ignore[union-attr]


async def test_a_graft_adds_steps_to_the_running_workflow(harness: Harness) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("a")
    await graph.create(backend)
    more = Graph(graph.queue)
    more.id, more.ids = graph.id, dict(graph.ids)
    more.step("b", after=("a",))
    more.step("c")
    await backend.create_workflow_steps(graph.id, more.steps)
    assert await more.status(backend, "b") is S.WAITING
    with pytest.raises(ValueError, match="named 'c'"):
        dup = Graph(graph.queue)
        dup.id = graph.id
        await backend.create_workflow_steps(graph.id, [dup.step("c")])
    steps = await backend.list_workflow_steps(graph.id)
    assert [(s.name, s.after) for s in steps] == [("a", ()), ("b", ("a",)), ("c", ())]
    # A step added after its dependency ended is decided at once.
    await run(backend, more, "a")
    late = Graph(graph.queue)
    late.id, late.ids = graph.id, dict(more.ids)
    late.step("d", after=("a",))
    await backend.create_workflow_steps(graph.id, late.steps)
    assert await late.status(backend, "d") is S.PENDING


async def test_an_operator_cancel_of_a_waiting_step_is_swept_down_the_graph(
    harness: Harness,
) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("a")
    graph.step("b", after=("a",))
    graph.step("c", after=("b",))
    await graph.create(backend)
    assert await backend.write_cancel_request(graph.ids["b"], "not needed") == "cancelled"
    await backend.release_stale_workflow_steps()
    c = await reload(backend, graph.ids["c"])
    assert c.status is S.CANCELLED and c.cancel_reason == "dependency b cancelled"
    await run(backend, graph, "a")
    listed = await backend.list_workflows(WorkflowFilter(WorkflowStatus.FAILED))
    assert graph.id in [w.id for w in listed]


@pytest.mark.parametrize("requires", ["succeeded", "finished"])
def test_the_rule_both_backends_apply(requires: str) -> None:
    ended = sorted(TERMINAL_STATUSES)
    for status in ended:
        expected = "release" if requires == "finished" or status is S.SUCCEEDED else "cancel"
        assert decide_step(requires, [status]) == expected  # type: ignore[arg-type]
        assert decide_step(requires, [status, S.RUNNING]) == (
            "cancel" if expected == "cancel" and requires == "succeeded" else "wait"
        )
    assert decide_step(requires, []) == "release"  # type: ignore[arg-type]


async def test_a_waiting_step_holds_its_unique_key(harness: Harness) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("a")
    graph.step("b", after=("a",), unique_key="nightly-load")
    await graph.create(backend)
    with pytest.raises(SingletonCollisionError) as refused:
        await backend.enqueue(args(queue=new_queue(), unique_key="nightly-load"))
    assert refused.value.existing_job_id == graph.ids["b"]
    await run(backend, graph, "a")
    assert await graph.status(backend, "b") is S.PENDING


async def test_the_sweep_leaves_steps_it_cannot_move_untouched(harness: Harness) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("a")
    for n in range(20):
        graph.step(f"w{n}", after=("a",))
    await graph.create(backend)
    release = await backend.release_stale_workflow_steps()
    assert (release.released, release.cancelled, release.ended) == (0, 0, ())
    if harness.pg is not None:  # not even a row lock (a WAL record) on the waiting rows
        rows = await harness.sql(
            "SELECT xmax::text AS xmax FROM {schema}.jobs WHERE status = 'waiting'"
        )
        assert {row["xmax"] for row in rows} == {"0"}


async def test_a_step_keeps_its_expired_result_until_its_workflow_ended(
    harness: Harness,
) -> None:
    """The steps after it read its result (``ctx.upstream``): the result TTL sweep leaves it
    while the workflow runs and clears it on the first pass after the workflow ended."""
    backend = harness.backend
    graph = Graph()
    graph.step("a", result_ttl=timedelta(minutes=10))
    graph.step("b", after=("a",))
    await graph.create(backend)
    await run(backend, graph, "a", result={"rows": 3})
    await harness.travel(600 + 5)
    assert await backend.expire_results() == 0
    assert (await backend.get_upstream(graph.ids["b"]))["a"].result == {"rows": 3}
    await run(backend, graph, "b")
    assert (await backend.get_workflow(graph.id)).status is WorkflowStatus.SUCCEEDED  # type: ignore[union-attr]
    assert await backend.expire_results() == 1
    assert (await reload(backend, graph.ids["a"])).result is None


async def test_an_operators_cancel_and_retry_of_a_workflow_are_in_the_operator_log(
    harness: Harness,
) -> None:
    backend = harness.backend
    graph = await diamond(harness)
    done = await backend.cancel_workflow(graph.id, "bad input", audit=Audit("ops@box", "bad"))
    assert (done.cancelled, done.stopping) == (4, 0)
    assert await backend.retry_workflow(graph.id, audit=Audit("ops@box")) == 4
    assert await backend.cancel_workflow(graph.id) is not None  # no audit: no row
    logged = await backend.list_operator_log(target=str(graph.id))
    assert [(e.action, e.by, e.reason, e.detail) for e in reversed(logged)] == [
        ("workflow_cancel", "ops@box", "bad", {"cancelled": 4, "stopping": 0}),
        ("workflow_retry", "ops@box", None, {"retried": 4}),
    ]


@pytest.mark.parametrize("failing", [False, True])
async def test_a_gated_join_waits_for_every_parent_and_a_failure_cancels_it_at_once(
    harness: Harness, failing: bool
) -> None:
    """A join with GATED_DEPENDENCIES parents has a count-down gate: it stays waiting until
    its last parent ended, unless one fails, which cancels it at once."""
    backend = harness.backend
    graph = Graph()
    parents = [f"p{n}" for n in range(GATED_DEPENDENCIES)]
    for name in parents:
        graph.step(name, retry_kind="non_retryable")
    graph.step("join", after=tuple(parents))
    await graph.create(backend)
    for n, name in enumerate(parents[:-1]):
        failed = failing and n == 2
        await run_any(backend, graph, "failed" if failed else "succeeded")
        expected = S.CANCELLED if failing and n >= 2 else S.WAITING
        assert await graph.status(backend, "join") is expected, name
    await run_any(backend, graph, "succeeded")
    assert await graph.status(backend, "join") is (S.CANCELLED if failing else S.PENDING)


async def run_any(backend: Backend, graph: Graph, outcome: str) -> None:
    """Claim one due step of the graph's queue, end it with ``outcome``, run the hook."""
    worker = uuid4()
    [job] = await backend.dispatch_batch(worker, [graph.queue], 1, LEASE)
    await backend.mark_started_many(worker, [Start(job.id, job.attempt)])
    if outcome == "succeeded":
        assert await backend.mark_succeeded(job.lease(), None)
    else:
        assert await backend.mark_failed_or_retry(job.lease(), BOOM, None) is not None
    await backend.release_workflow_steps([job.id])
