"""Live progress over Redis (database 13 of the local Redis): every report is published on the
job's channel in order, ``watch_progress`` yields reports until the job ends (through Redis
or by reading the row), and a Redis outage never reaches a job."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest
import structlog
from redis.asyncio import Redis

from taskq_core import JobContext, actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.client import JobsClient
from taskq_core.clock import FakeClock
from taskq_core.errors import JobNotFoundError
from taskq_core.obs.logs import configure_logging, get_logger, reset_logging
from taskq_core.progress import ProgressReport, progress_channel
from taskq_core.progress_redis import RedisProgressPublisher, redis_client
from taskq_core.worker.runtime import Worker
from tests.obs import progress_log_actors as actors
from tests.worker.conftest import fast_settings

REDIS_URL = os.environ.get("TASKQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
CLOSED_PORT_URL = "redis://127.0.0.1:1/13"
HOUR = 3600.0


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis.from_url(REDIS_URL)
    try:
        await client.ping()
    except Exception as exc:
        await client.aclose()
        pytest.fail(f"Redis at {REDIS_URL} is not reachable ({exc}); the progress tests use it")
    yield client
    await client.aclose()


@pytest.fixture
def schema() -> str:
    """A schema name of the test's own: its channels are nobody else's."""
    return f"p_{uuid4().hex[:12]}"


@pytest.fixture
def json_logs() -> Iterator[None]:
    configure_logging(fmt="json", level="INFO")
    yield
    reset_logging()
    structlog.reset_defaults()


def worker(backend: InMemoryBackend, registry: list[Any], **overrides: Any) -> Worker:
    return Worker(
        fast_settings(**overrides),
        {ref.name: ref for ref in registry},
        backend=backend,
        until_idle=True,
        install_signal_handlers=False,
    )


async def test_every_report_is_published_on_the_jobs_channel_in_order(
    redis: Redis, schema: str
) -> None:
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        job = await client.enqueue(actors.many_reports, {"count": 30})
    pubsub = redis.pubsub()
    await pubsub.subscribe(progress_channel(schema, job.id))
    try:
        run = worker(
            backend,
            [actors.many_reports],
            redis_url=REDIS_URL,
            schema_name=schema,
            progress_flush_interval=HOUR,
        )
        assert await asyncio.wait_for(run.run(), 30) == 0
        documents: list[dict[str, Any]] = []
        async with asyncio.timeout(10):
            while len(documents) < 30:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
                if message is not None:
                    documents.append(json.loads(message["data"]))
    finally:
        await pubsub.aclose()
    assert [d["seq"] for d in documents] == list(range(1, 31))
    assert set(documents[0]) == {"job_id", "seq", "current", "total", "message", "ts"}
    assert all(d["job_id"] == str(job.id) and d["total"] == 30 for d in documents)
    assert [d["message"] for d in documents[-2:]] == ["item 29", "item 30"]


# Gates of the watched actor: ``start`` lets it report, ``more`` lets it finish.
GATES: dict[str, asyncio.Event] = {}


@actor
async def watched(payload: dict[str, Any], ctx: JobContext[dict[str, Any]]) -> None:
    await GATES["start"].wait()
    for index in (1, 2, 3):
        await ctx.report_progress(index, 6, "first half")
    await GATES["more"].wait()
    for index in (4, 5, 6):
        await ctx.report_progress(index, 6, "done" if index == 6 else "second half")


async def subscribers(redis: Redis, channel: str) -> int:
    [(_, count)] = await redis.pubsub_numsub(channel)
    return int(count)


@pytest.mark.parametrize("live", ["redis", "polling"])
async def test_watch_progress_yields_reports_in_order_until_the_job_ends(
    redis: Redis, schema: str, live: str
) -> None:
    GATES.update(start=asyncio.Event(), more=asyncio.Event())
    url = REDIS_URL if live == "redis" else None
    backend = InMemoryBackend()
    async with JobsClient(backend=backend, schema=schema) as client:
        job = await client.enqueue(watched, {})
        run = asyncio.create_task(
            worker(
                backend,
                [watched],
                redis_url=url,
                schema_name=schema,
                progress_flush_interval=0.05 if url is None else HOUR,
            ).run()
        )
        seen: list[ProgressReport] = []

        async def watch() -> None:
            feed = client.watch_progress(job.id, poll_interval=0.05, redis_url=url)
            async for report in feed:
                seen.append(report)
                if report.seq >= 3:
                    GATES["more"].set()

        watcher = asyncio.create_task(watch())
        async with asyncio.timeout(20):
            if url is not None:  # every report is heard once the feed has subscribed
                while await subscribers(redis, progress_channel(schema, job.id)) < 1:
                    await asyncio.sleep(0.01)
            GATES["start"].set()
            await watcher  # ends by itself: the job is terminal
            assert await run == 0
    seqs = [report.seq for report in seen]
    assert seqs == sorted(set(seqs)), seqs  # in order, none twice
    assert (seen[-1].seq, seen[-1].current, seen[-1].message) == (6, 6, "done")
    if url is not None:
        assert seqs == [1, 2, 3, 4, 5, 6]


async def test_watching_an_unknown_job_raises_not_found() -> None:
    async with JobsClient(backend=InMemoryBackend()) as client:
        with pytest.raises(JobNotFoundError):
            async for _ in client.watch_progress(uuid4(), redis_url=None):
                pass


@pytest.mark.usefixtures("json_logs")
async def test_a_redis_outage_never_fails_the_job_and_is_logged_once(
    capsys: pytest.CaptureFixture[str], schema: str
) -> None:
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        rows = await client.enqueue_batch([(actors.many_reports, {"count": 50})] * 3)
    run = worker(backend, [actors.many_reports], redis_url=CLOSED_PORT_URL, schema_name=schema)
    assert await asyncio.wait_for(run.run(), 30) == 0
    for row in rows:
        job = await backend.get(row.id)
        assert job is not None and job.status.value == "succeeded" and job.progress_seq == 50
    events = [json.loads(line)["event"] for line in capsys.readouterr().err.splitlines()]
    assert events.count("progress_publish_failed") == 1


@pytest.mark.usefixtures("json_logs")
async def test_the_publisher_says_when_redis_is_back(
    capsys: pytest.CaptureFixture[str], redis: Redis, schema: str
) -> None:
    clock = FakeClock()
    publisher = RedisProgressPublisher(
        redis_client(CLOSED_PORT_URL), schema=schema, clock=clock, log=get_logger("test")
    )
    job_id = UUID(int=7)
    report = ProgressReport(job_id, 1, 1, None, None, clock.now())
    assert await publisher.send([report]) is False
    publisher.publish(report)  # inside the pause: dropped at once, no second attempt
    assert publisher.dropped == 2
    await publisher._client.aclose()
    publisher._client = redis_client(REDIS_URL)  # Redis is back
    clock.advance(HOUR)
    assert await publisher.send([report]) is True
    await publisher.close()
    events = [json.loads(line)["event"] for line in capsys.readouterr().err.splitlines()]
    assert events == ["progress_publish_failed", "progress_publish_recovered"]
