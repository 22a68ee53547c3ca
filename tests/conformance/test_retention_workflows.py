"""Retention of workflows on every backend: nothing of a running workflow moves, whatever its
steps' age; an ended workflow moves whole, in one batch, once the last of its steps is due (its
end, against the longest retention among its steps' statuses), its row and edges with it; a
prune narrowed by status or queue never moves part of one; a workflow larger than a batch
moves alone; a job whose ``workflow_id`` names no workflow is pruned as any job."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from taskq_core.backend.protocol.workflows import (
    WORKFLOW_ID_KEY,
    WORKFLOW_STEP_KEY,
    WorkflowFilter,
    WorkflowStatus,
)
from taskq_core.ids import uuid7
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import job_in, new_queue
from tests.conformance.test_retention import ARCHIVE_FOR, KEEP, MARGIN, every_terminal, policy
from tests.conformance.test_workflows import Graph, run

S = JobStatus
YEARS = timedelta(days=3 * 365).total_seconds()


async def _chain(harness: Harness, *names: str, queue: str | None = None) -> Graph:
    """A created workflow whose steps run one after the other, each after the one before."""
    graph = Graph(queue)
    for before, name in zip((None, *names), names, strict=False):
        graph.step(name, after=() if before is None else (before,))
    await graph.create(harness.backend)
    return graph


async def _status(harness: Harness, graph: Graph) -> WorkflowStatus | None:
    row = await harness.backend.get_workflow(graph.id)
    return None if row is None else row.status


async def test_nothing_of_a_running_workflow_moves_whatever_its_age(harness: Harness) -> None:
    backend = harness.backend
    graph = await _chain(harness, "a", "b", "c")
    await run(backend, graph, "a", result={"rows": 3})
    plain, _ = await job_in(harness, S.SUCCEEDED)
    await harness.travel(YEARS)
    rules = every_terminal(timedelta(seconds=1), batch_size=1)
    assert (await backend.prune_jobs(rules, dry_run=True)).moved == {(S.SUCCEEDED, plain.queue): 1}
    assert (await backend.prune_jobs(rules)).moved == {(S.SUCCEEDED, plain.queue): 1}
    # a ended years ago, but its workflow runs: it stays, and b still reads its result.
    assert [await graph.status(backend, n) for n in "abc"] == [S.SUCCEEDED, S.PENDING, S.WAITING]
    assert await backend.get_archived_job(graph.ids["a"]) is None
    assert (await backend.get_upstream(graph.ids["b"]))["a"].result == {"rows": 3}
    row = await backend.get_workflow(graph.id)
    assert row is not None and row.status is WorkflowStatus.RUNNING
    assert row.counts == {S.SUCCEEDED: 1, S.PENDING: 1, S.WAITING: 1}
    await run(backend, graph, "b")
    await run(backend, graph, "c")
    assert await _status(harness, graph) is WorkflowStatus.SUCCEEDED


async def test_an_ended_workflow_moves_whole_once_its_last_step_is_due(harness: Harness) -> None:
    backend = harness.backend
    graph = await _chain(harness, "a", "b")
    await run(backend, graph, "a")
    plain, _ = await job_in(harness, S.SUCCEEDED)  # finished with a
    await harness.travel(KEEP.total_seconds() - 2 * MARGIN)
    await run(backend, graph, "b")
    assert await _status(harness, graph) is WorkflowStatus.SUCCEEDED
    await harness.travel(3 * MARGIN)
    # a finished KEEP + MARGIN ago, as the plain job did: that one moves, a waits for b.
    rules = policy(succeeded=KEEP)
    assert (await backend.prune_jobs(rules)).moved == {(S.SUCCEEDED, plain.queue): 1}
    assert await graph.status(backend, "a") is S.SUCCEEDED
    assert len(await backend.list_workflow_steps(graph.id)) == 2
    await harness.travel(KEEP.total_seconds())
    dry = await backend.prune_jobs(rules, dry_run=True)
    assert dry.moved == {(S.SUCCEEDED, graph.queue): 2}
    heard: list[int] = []
    result = await backend.prune_jobs(rules, on_batch=heard.append)
    assert (result.moved, heard) == (dry.moved, [2])
    archived = [await backend.get_archived_job(graph.ids[name]) for name in "ab"]
    assert [a.job.metadata[WORKFLOW_STEP_KEY] for a in archived if a is not None] == ["a", "b"]
    assert {a.job.metadata[WORKFLOW_ID_KEY] for a in archived if a is not None} == {str(graph.id)}
    assert len({a.archived_at for a in archived if a is not None}) == 1  # one batch
    for name in "ab":
        assert await backend.get(graph.ids[name]) is None
    # The workflow's row and edges went with its steps: it reads as unknown.
    assert await backend.get_workflow(graph.id) is None
    assert await backend.list_workflow_steps(graph.id) == []
    assert await backend.get_upstream(graph.ids["b"]) == {}
    assert graph.id not in [w.id for w in await backend.list_workflows(WorkflowFilter())]
    with pytest.raises(ValueError):
        await backend.retry_workflow(graph.id)
    # Archived together, they leave the archive together (with the plain job, archived first).
    await harness.travel((ARCHIVE_FOR + timedelta(days=1)).total_seconds() + MARGIN)
    assert await backend.expire_archive(10) == 3
    for name in "ab":
        assert await backend.get_archived_job(graph.ids[name]) is None


async def test_the_longest_retention_among_its_steps_holds_the_workflow(harness: Harness) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("a", retry_kind="non_retryable")
    graph.step("report", after=("a",), requires="finished")
    await graph.create(backend)
    await run(backend, graph, "a", outcome="failed")
    await run(backend, graph, "report")
    assert await _status(harness, graph) is WorkflowStatus.FAILED
    rules = policy(succeeded=KEEP, failed=KEEP * 10)
    await harness.travel(KEEP.total_seconds() + MARGIN)
    assert (await backend.prune_jobs(rules)).total == 0  # report alone would have gone
    await harness.travel(KEEP.total_seconds() * 10)
    # A prune of succeeded jobs only never moves the failed step, so not the workflow either.
    assert (await backend.prune_jobs(policy(succeeded=KEEP))).total == 0
    assert (await backend.prune_jobs(rules)).moved == {
        (S.FAILED, graph.queue): 1,
        (S.SUCCEEDED, graph.queue): 1,
    }
    assert await backend.get_workflow(graph.id) is None


async def test_a_prune_of_one_queue_leaves_a_workflow_with_steps_elsewhere(
    harness: Harness,
) -> None:
    backend = harness.backend
    first, other = new_queue(), new_queue()
    graph = Graph(first)
    graph.step("a")
    graph.step("b", after=("a",), queue=other)
    await graph.create(backend)
    await run(backend, graph, "a")
    graph.queue = other  # run dispatches from the graph's queue
    await run(backend, graph, "b")
    await harness.travel(KEEP.total_seconds() + MARGIN)
    for queue in (first, other):
        assert (await backend.prune_jobs(every_terminal(KEEP, queue=queue))).total == 0
    assert (await backend.prune_jobs(every_terminal(KEEP))).moved == {
        (S.SUCCEEDED, first): 1,
        (S.SUCCEEDED, other): 1,
    }


async def test_a_batch_takes_workflows_whole_and_a_larger_one_moves_alone(
    harness: Harness,
) -> None:
    backend = harness.backend
    plain, _ = await job_in(harness, S.SUCCEEDED)
    big = await _chain(harness, "a", "b", "c")
    for name in "abc":
        await run(backend, big, name)
    await harness.travel(1)
    small = await _chain(harness, "x")
    await run(backend, small, "x")
    await harness.travel(KEEP.total_seconds() + MARGIN)
    heard: list[int] = []
    result = await backend.prune_jobs(every_terminal(KEEP, batch_size=2), on_batch=heard.append)
    # The plain job leaves room for one more: big takes it whole (3 steps); small goes next.
    assert heard == [4, 1]
    assert result.moved == {(S.SUCCEEDED, plain.queue): 1, (S.SUCCEEDED, big.queue): 3,
                            (S.SUCCEEDED, small.queue): 1}  # fmt: skip
    for graph in (big, small):
        assert await backend.get_workflow(graph.id) is None


async def test_a_step_retried_alone_holds_its_workflow_until_it_is_due(harness: Harness) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("a", retry_kind="non_retryable")
    graph.step("b", after=("a",))
    await graph.create(backend)
    await run(backend, graph, "a", outcome="failed")  # b is cancelled, the workflow failed
    assert await _status(harness, graph) is WorkflowStatus.FAILED
    assert await backend.retry_job(graph.ids["a"])  # an operator retries the step alone
    await harness.travel(YEARS)
    rules = every_terminal(KEEP)
    assert (await backend.prune_jobs(rules)).total == 0  # a is pending: nothing moves
    await run(backend, graph, "a")
    # The workflow ended years ago, but a just did: the end counts from a.
    await harness.travel(KEEP.total_seconds() - MARGIN)
    assert (await backend.prune_jobs(rules)).total == 0
    await harness.travel(2 * MARGIN)
    assert (await backend.prune_jobs(rules)).moved == {
        (S.SUCCEEDED, graph.queue): 1,
        (S.CANCELLED, graph.queue): 1,
    }


async def test_a_retried_workflow_runs_again_and_stays_until_its_new_end_is_due(
    harness: Harness,
) -> None:
    backend = harness.backend
    graph = Graph()
    graph.step("a", retry_kind="non_retryable")
    await graph.create(backend)
    await run(backend, graph, "a", outcome="failed")
    await harness.travel(KEEP.total_seconds() + MARGIN)
    assert await backend.retry_workflow(graph.id) == 1
    await harness.travel(YEARS)
    rules = every_terminal(KEEP)
    assert (await backend.prune_jobs(rules)).total == 0
    await run(backend, graph, "a")
    assert await _status(harness, graph) is WorkflowStatus.SUCCEEDED
    await harness.travel(KEEP.total_seconds() + MARGIN)
    assert (await backend.prune_jobs(rules)).moved == {(S.SUCCEEDED, graph.queue): 1}
    assert await backend.get_workflow(graph.id) is None


async def test_a_job_whose_workflow_id_names_no_workflow_is_pruned_alone(
    harness: Harness,
) -> None:
    backend = harness.backend
    running = await _chain(harness, "a", "b")
    queue = new_queue()
    for _ in range(3):
        await job_in(harness, S.SUCCEEDED, queue=queue)
    for named in (str(uuid7()), "nightly", 42):
        await job_in(harness, S.SUCCEEDED, queue=queue, metadata={WORKFLOW_ID_KEY: named})
    # Tagged by hand with a workflow that exists: one of its steps, to the prune as to its reads.
    tagged, _ = await job_in(harness, S.SUCCEEDED, metadata={WORKFLOW_ID_KEY: str(running.id)})
    await harness.travel(KEEP.total_seconds() + MARGIN)
    rules = every_terminal(KEEP, batch_size=2)
    assert (await backend.prune_jobs(rules, dry_run=True)).moved == {(S.SUCCEEDED, queue): 6}
    heard: list[int] = []
    result = await backend.prune_jobs(rules, on_batch=heard.append)
    assert (result.moved, heard) == ({(S.SUCCEEDED, queue): 6}, [2, 2, 2, 0])
    assert (await backend.get(tagged.id)) is not None
    assert [s.job_id for s in await backend.list_workflow_steps(running.id)][-1] == tagged.id


async def test_two_prunes_at_once_move_each_workflow_once_and_whole(harness: Harness) -> None:
    backend = harness.backend
    graphs = []
    for _ in range(4):
        graph = await _chain(harness, "a", "b")
        await run(backend, graph, "a")
        await run(backend, graph, "b")
        graphs.append(graph)
    await harness.travel(KEEP.total_seconds() + MARGIN)
    rules = every_terminal(KEEP, batch_size=1)
    first, second = await asyncio.gather(backend.prune_jobs(rules), backend.prune_jobs(rules))
    third = await backend.prune_jobs(rules)  # a workflow one prune skipped while the other held it
    assert first.total + second.total + third.total == 8
    for graph in graphs:
        assert await backend.get_workflow(graph.id) is None
        for job_id in graph.ids.values():
            assert await backend.get(job_id) is None
            assert await backend.get_archived_job(job_id) is not None
