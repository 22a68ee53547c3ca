"""``get_upstreams`` on every backend: many steps' dependencies in one read, each as
``get_upstream`` answers it alone (a step without dependencies, or no step at all, gets
``{}``)."""

from __future__ import annotations

from uuid import uuid4

from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.test_workflows import diamond, run


async def test_get_upstreams_answers_each_step_as_get_upstream_does(harness: Harness) -> None:
    backend = harness.backend
    graph = await diamond(harness)
    await run(backend, graph, "a", result={"rows": 3})
    await run(backend, graph, "b", outcome="failed")  # d is cancelled (b was added first)
    await run(backend, graph, "c", result=[1, 2])
    unknown = uuid4()
    ids = [graph.ids[name] for name in "abcd"] + [unknown]

    found = await backend.get_upstreams(ids)

    assert set(found) == set(ids)
    for job_id in ids:
        assert found[job_id] == await backend.get_upstream(job_id)
    assert found[graph.ids["a"]] == {} and found[unknown] == {}
    d = found[graph.ids["d"]]
    assert {name: up.status for name, up in d.items()} == {
        "b": JobStatus.FAILED,
        "c": JobStatus.SUCCEEDED,
    }
    assert d["c"].result == [1, 2] and d["b"].error_class is not None
    assert await backend.get_upstreams([]) == {}
