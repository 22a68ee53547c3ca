"""A worker whose tracer provider TaskQ installed records each job's CONSUMER span without the
SDK and exports it from a process of its own (obs/span_shipping.py): what reaches a real
OTLP/HTTP collector stand-in from a real ``taskq worker``, and that the exporter process ends
with the worker."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, JobFilter
from taskq_core.statemachine import JobStatus
from tests.conftest import TASKQ_BIN, PgTarget
from tests.obs.collector import Received, attributes, exporting_worker_env, http_collector

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
ACTORS = "tests.obs.traced_actors:registry"


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    db = await PostgresBackend.connect(pg.dsn, pg.schema)
    yield db
    await db.close()


def worker_env(pg: PgTarget, endpoint: str, **otel: str) -> dict[str, str]:
    return exporting_worker_env(
        pg.env(),
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        **otel,
    )


async def drain(pg: PgTarget, endpoint: str, **otel: str) -> None:
    """`taskq worker --until-idle` exporting to ``endpoint``; it must exit 0."""
    proc = await asyncio.create_subprocess_exec(
        TASKQ_BIN, "worker", "--actors", ACTORS, "--until-idle",
        cwd=ROOT, env=worker_env(pg, endpoint, **otel), stderr=subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()


def consumer_spans(received: Received) -> dict[str, Any]:
    """The CONSUMER spans received, by job id."""
    spans = [span for _, span in received.spans() if span.kind == trace_pb2.Span.SPAN_KIND_CONSUMER]
    by_job = {attributes(span.attributes)["messaging.message.id"]: span for span in spans}
    assert len(by_job) == len(spans), "a job's span was exported twice"
    return by_job


async def test_the_body_reads_annotates_and_parents_on_its_consumer_span(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    job = await backend.enqueue(EnqueueArgs("traced", {"order": "A-17"}))
    with http_collector() as (endpoint, received):
        await drain(pg, endpoint)
    span = consumer_spans(received)[str(job.id)]
    assert span.name == "process traced"
    attrs = attributes(span.attributes)
    assert attrs["taskq.actor"] == "traced" and attrs["taskq.outcome"] == "succeeded"
    assert attrs["app.order"] == "A-17"  # set by the body on the current span
    assert [event.name for event in span.events] == ["app.checked"]
    assert span.status.code == trace_pb2.Status.STATUS_CODE_UNSET
    # The span the body made is its child, in the same trace, exported by the SDK beside it.
    (child,) = [s for _, s in received.spans() if s.name == "app.charge"]
    assert child.trace_id == span.trace_id and child.parent_span_id == span.span_id
    # What the body saw as its trace is the trace exported, and the job row's result says so.
    row = await backend.get(job.id)
    assert row is not None and row.result == span.trace_id.hex()
    dispatches = {s.span_id for _, s in received.spans() if s.name == "dispatch"}
    assert {link.span_id for link in span.links} & dispatches


async def test_every_job_has_its_span_by_the_worker_exit(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    # More than a batch and not a whole number of them: full batches go as they fill, the
    # rest with the exit.
    jobs = await backend.enqueue_batch([EnqueueArgs("plain", {"n": n}) for n in range(700)])
    with http_collector() as (endpoint, received):
        await drain(pg, endpoint, OTEL_BSP_MAX_EXPORT_BATCH_SIZE="300")
    assert set(consumer_spans(received)) == {str(job.id) for job in jobs}


async def test_the_sampler_decides_and_unsampled_jobs_still_run(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    await backend.enqueue_batch([EnqueueArgs("plain", {"n": n}) for n in range(50)])
    with http_collector() as (endpoint, received):
        await drain(pg, endpoint, OTEL_TRACES_SAMPLER="always_off")
    assert consumer_spans(received) == {}
    done = await backend.list_jobs(JobFilter(limit=None))
    assert [job.status for job in done] == [JobStatus.SUCCEEDED] * 50


async def test_a_ratio_sampler_exports_the_jobs_whose_trace_ids_it_samples(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    # Each body returns the trace id it ran under, sampled or not: the ratio's rule on that id
    # says which spans must arrive, with everything a sampled span carries.
    jobs = await backend.enqueue_batch(
        [EnqueueArgs("traced", {"order": f"A-{n}"}) for n in range(60)]
    )
    with http_collector() as (endpoint, received):
        await drain(pg, endpoint, OTEL_TRACES_SAMPLER="traceidratio", OTEL_TRACES_SAMPLER_ARG="0.5")
    bound = TraceIdRatioBased(0.5).bound
    ran_under = {}
    for job in jobs:
        row = await backend.get(job.id)
        assert row is not None and row.status is JobStatus.SUCCEEDED
        ran_under[str(job.id)] = row.result
    sampled = {
        job_id
        for job_id, trace_id in ran_under.items()
        if int(trace_id, 16) & TraceIdRatioBased.TRACE_ID_LIMIT < bound
    }
    exported = consumer_spans(received)
    assert set(exported) == sampled and 5 < len(sampled) < 55
    for job_id, span in exported.items():
        assert span.trace_id.hex() == ran_under[job_id]
        attrs = attributes(span.attributes)
        assert attrs["taskq.actor"] == "traced" and attrs["app.order"].startswith("A-")
        assert attrs["messaging.system"] == "taskq" and attrs["taskq.outcome"] == "succeeded"
    # A body under an unsampled span starts unsampled spans: only sampled traces' children.
    children = {s.trace_id.hex() for _, s in received.spans() if s.name == "app.charge"}
    assert children == {ran_under[job_id] for job_id in sampled}


async def test_the_exporter_process_ends_when_the_worker_is_killed(
    pg: PgTarget, backend: PostgresBackend
) -> None:
    await backend.enqueue_batch([EnqueueArgs("plain", {"n": n}) for n in range(20)])
    await backend.enqueue(EnqueueArgs("waits"))
    with http_collector() as (endpoint, received):
        env = worker_env(pg, endpoint, OTEL_BSP_SCHEDULE_DELAY="50")
        proc = await asyncio.create_subprocess_exec(
            TASKQ_BIN, "worker", "--actors", ACTORS, cwd=ROOT, env=env,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            async with asyncio.timeout(60):
                while len(consumer_spans(received)) < 20:  # exported: the process runs
                    await asyncio.sleep(0.05)
            family = psutil.Process(proc.pid).children(recursive=True)
            assert any("multiprocessing" in " ".join(p.cmdline()) for p in family), family
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
            _, alive = await asyncio.to_thread(psutil.wait_procs, family, timeout=30)
            assert alive == [], "a child outlived its killed worker"
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
