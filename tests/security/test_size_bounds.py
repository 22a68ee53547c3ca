"""Bounded sizes (issue 33): a payload over TASKQ_MAX_PAYLOAD_BYTES is refused at every
entrance with an error naming both sizes, a result over TASKQ_MAX_RESULT_BYTES fails its job
as unstorable, and the listings and the job's own screens stay small however large the
payloads and results they show are (a test-time raised limit lets big ones in).

Entrances: JobsClient's ``enqueue``, ``enqueue_batch`` (and a batch's finalizer),
``enqueue_many_fast`` (COPY), ``create_schedule``; ``taskq enqueue``; a backend given
EnqueueArgs directly (tests/conformance/test_payload_limits.py, on both backends). The web
UI's API cannot enqueue. There is no SQL enqueue function yet (issue 37 adds one).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import asyncpg
import pytest

from taskq_cli.json_preview import PREVIEW_CHARS
from taskq_core import EnqueueItem, JobsClient, PayloadTooLargeError
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.queries import render
from taskq_core.backend.protocol import EnqueueArgs, JobFilter, JobRow, Start
from taskq_core.batches import AbortBatchAfter
from taskq_core.statemachine import JobStatus
from tests.cli.conftest import one_error_line
from tests.conftest import TASKQ_BIN, PgTarget
from tests.ui.inprocess import SAME_ORIGIN, open_ui

pytestmark = [pytest.mark.postgres, pytest.mark.fresh_schema]

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
DEFAULT_LIMIT = MIB
BIG = 5 * MIB  # a big payload, allowed by the raised limit the listings tests use
RAISED = 8 * MIB
# ``{"blob": "..."}``: the text around the blob.
_WRAPPING = len(json.dumps({"blob": ""}))


def payload_of(size: int, letter: str = "x") -> dict[str, str]:
    """A payload whose JSON text is ``size`` bytes."""
    return {"blob": letter * (size - _WRAPPING)}


def assert_names_both_sizes(message: str, size: int, limit: int, variable: str) -> None:
    assert f"{size:,} bytes" in message and f"{limit:,} bytes" in message, message
    assert variable in message, message


async def stored_jobs(pg: PgTarget) -> list[JobRow]:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=1)
    try:
        return await backend.list_jobs(JobFilter(limit=None))
    finally:
        await backend.close()


@pytest.fixture
async def client(pg: PgTarget, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[JobsClient]:
    """A JobsClient that reads its settings as an application's does (the default limit)."""
    monkeypatch.delenv("TASKQ_MAX_PAYLOAD_BYTES", raising=False)
    async with JobsClient(pg.dsn, schema=pg.schema) as opened:
        yield opened


# --- payloads: refused at every entrance ---------------------------------------------------
async def test_the_client_refuses_an_oversized_payload_at_every_entrance(
    client: JobsClient, pg: PgTarget
) -> None:
    big = payload_of(DEFAULT_LIMIT + 1)
    entrances: dict[str, Any] = {
        "enqueue": lambda: client.enqueue("resize", big),
        "enqueue_batch": lambda: client.enqueue_batch([("resize", {}), ("resize", big)]),
        "enqueue_many_fast": lambda: client.enqueue_many_fast([("resize", {}), ("resize", big)]),
        "finalizer": lambda: client.enqueue_batch(
            [("resize", {})], finalizer=EnqueueItem("summarize", big)
        ),
        "policy batch": lambda: client.enqueue_batch(
            [("resize", big)], failure_policy=AbortBatchAfter(1)
        ),
        "schedule": lambda: client.create_schedule("nightly", "resize", "0 3 * * *", payload=big),
    }
    for name, enqueue in entrances.items():
        with pytest.raises(PayloadTooLargeError) as refused:
            await enqueue()
        assert_names_both_sizes(
            str(refused.value), DEFAULT_LIMIT + 1, DEFAULT_LIMIT, "TASKQ_MAX_PAYLOAD_BYTES"
        )
        assert (refused.value.size, refused.value.limit) == (DEFAULT_LIMIT + 1, DEFAULT_LIMIT), name
    assert await stored_jobs(pg) == []
    assert await client.list_schedules() == []


async def test_a_raised_limit_lets_a_big_payload_in(
    pg: PgTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKQ_MAX_PAYLOAD_BYTES", str(RAISED))
    async with JobsClient(pg.dsn, schema=pg.schema) as client:
        job = await client.enqueue("resize", payload_of(BIG))
        assert await client.enqueue_many_fast([("resize", payload_of(BIG))]) == 1
        with pytest.raises(PayloadTooLargeError):
            await client.enqueue("resize", payload_of(RAISED + 1))
    stored = await stored_jobs(pg)
    assert job.id in {j.id for j in stored}
    assert sorted(len(json.dumps(j.payload)) for j in stored) == [BIG, BIG]


async def test_a_backend_given_enqueue_args_directly_refuses_them(pg: PgTarget) -> None:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_payload_bytes=1000)
    try:
        with pytest.raises(PayloadTooLargeError) as refused:
            await backend.enqueue(EnqueueArgs(actor="resize", payload=payload_of(1001)))
        assert_names_both_sizes(str(refused.value), 1001, 1000, "TASKQ_MAX_PAYLOAD_BYTES")
        async with backend.transaction() as conn:  # the caller's transaction: same rule
            with pytest.raises(PayloadTooLargeError):
                await backend.enqueue(
                    EnqueueArgs(actor="resize", payload=payload_of(1001)), connection=conn
                )
    finally:
        await backend.close()
    assert await stored_jobs(pg) == []


@pytest.mark.parametrize("count", ["1", "3"])
def test_taskq_enqueue_refuses_an_oversized_payload_in_one_line(
    taskq_cli: Any, pg: PgTarget, tmp_path: Path, count: str
) -> None:
    (tmp_path / "big.json").write_text(json.dumps(payload_of(DEFAULT_LIMIT + 1)))
    result = taskq_cli(
        "enqueue", "resize", "--payload", "@big.json", "--count", count, env=pg.env()
    )
    line = one_error_line(result)
    assert_names_both_sizes(line, DEFAULT_LIMIT + 1, DEFAULT_LIMIT, "TASKQ_MAX_PAYLOAD_BYTES")
    assert result.stdout == ""
    raised = taskq_cli(
        "enqueue",
        "resize",
        "--payload",
        "@big.json",
        env=pg.env(TASKQ_MAX_PAYLOAD_BYTES=str(2 * MIB)),
    )
    assert raised.exit_code == 0, raised.stderr


async def test_the_web_ui_cannot_enqueue(pg: PgTarget) -> None:
    """The admin UI's API has no route that takes a payload to enqueue (a schedule's run
    enqueues the payload stored with it): nothing to bound there."""
    async with open_ui(pg) as ui:
        paths = {
            path
            for route in ui.app.routes
            for path in [route.path]
            if "POST" in getattr(route, "methods", ())
        }
        made = [p for p in paths if not p.endswith(_ACTIONS)]
        assert made == [], made
        big = {"actor": "resize", "payload": payload_of(DEFAULT_LIMIT + 1)}
        answer = await ui.client.post("/api/jobs", json=big, headers=SAME_ORIGIN)
        assert answer.status_code in (404, 405)
    assert await stored_jobs(pg) == []


# Every POST the UI has acts on what exists (or signs in and out). A schedule's run makes a
# job, but of the payload stored with the schedule (bounded when it was stored), never one
# from the request.
_ACTIONS = (
    "/retry",
    "/cancel",
    "/pause",
    "/resume",
    "/enable",
    "/disable",
    "/run",
    "/ack",  # a stale worker's alert acknowledged
    "/login",
    "/logout",
)


# --- results: an oversized one fails its job --------------------------------------------------
async def _enqueue(pg: PgTarget, *items: EnqueueArgs) -> list[JobRow]:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=1)
    try:
        return [await backend.enqueue(item) for item in items]
    finally:
        await backend.close()


def test_an_oversized_result_fails_its_job_as_unstorable(pg: PgTarget) -> None:
    big, small = asyncio.run(
        _enqueue(
            pg,
            EnqueueArgs(actor="echo", payload=payload_of(5000)),
            EnqueueArgs(actor="echo", payload=payload_of(500)),
        )
    )
    env = pg.env(
        TASKQ_MAX_RESULT_BYTES="2000",
        TASKQ_IDLE_SETTLE_WINDOW="0.3",
        TASKQ_IDLE_POLL_INTERVAL="0.1",
        TASKQ_HEALTH_ENABLED="false",
        TASKQ_LOG_FORMAT="json",
    )
    done = subprocess.run(
        [TASKQ_BIN, "worker", "--actors", "tests.e2e.e2e_actors:registry", "--until-idle"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr  # --until-idle: some jobs failed
    rows = {job.id: job for job in asyncio.run(stored_jobs(pg))}
    failed = rows[big.id]
    assert failed.status is JobStatus.FAILED
    assert failed.result is None
    assert failed.error_class == "UnstorableResult"
    assert failed.error_message is not None
    assert_names_both_sizes(failed.error_message, 5000, 2000, "TASKQ_MAX_RESULT_BYTES")
    assert failed.attempt == 1  # not retried: the same body would return the same value
    assert rows[small.id].status is JobStatus.SUCCEEDED
    assert rows[small.id].result == payload_of(500)
    assert "job_result_unstorable" in done.stderr


# --- listings and screens stay small -------------------------------------------------------
async def _big_jobs(pg: PgTarget) -> tuple[JobRow, JobRow]:
    """Four waiting jobs with 5 MB payloads and one succeeded job with a 5 MB result (a
    raised limit lets them in); returns (a waiting one, the succeeded one)."""
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_payload_bytes=RAISED)
    try:
        waiting = await backend.enqueue_batch(
            [EnqueueArgs(actor="resize", payload=payload_of(BIG, "p")) for _ in range(4)]
        )
        job = await backend.enqueue(
            EnqueueArgs(actor="report", queue="reports", payload=payload_of(BIG, "q"))
        )
        worker = uuid4()
        [claimed] = await backend.dispatch_batch(worker, ["reports"], 1, _LEASE)
        await backend.mark_started_many(worker, [Start(job.id, claimed.attempt)])
        assert await backend.mark_succeeded(claimed.lease(), payload_of(BIG, "r"))
        done = await backend.get(job.id)
        assert done is not None and done.status is JobStatus.SUCCEEDED
        return waiting[0], done
    finally:
        await backend.close()


_LEASE = timedelta(seconds=60)
SMALL = 64 * 1024  # what a listing or a screen of a few jobs may weigh, whatever they carry


async def test_listings_read_no_payload_result_or_traceback(pg: PgTarget) -> None:
    """The plans' output columns: the listing statements never fetch the heavy three."""
    any_search = (None,) * 12
    statements: dict[str, tuple[Any, ...]] = {
        "search_jobs": (*any_search, None, None, 100),
        "list_recent_jobs": (None, None, None, 100),
        "list_batch_jobs": (uuid4(), None, 20),
    }
    conn = await asyncpg.connect(pg.dsn)
    try:
        for name, params in statements.items():
            plan = await conn.fetchval(
                f"EXPLAIN (VERBOSE, FORMAT JSON) {render(name, pg.schema)}", *params
            )
            top = json.loads(plan)[0]["Plan"]
            columns = " ".join(top["Output"])
            assert "actor" in columns and "error_message" in columns, (name, columns)
            for heavy in ("payload", "result", "error_traceback"):
                assert not any(c.split(".")[-1] == heavy for c in top["Output"]), (name, heavy)
    finally:
        await conn.close()


def test_jobs_list_and_show_stay_small_with_big_payloads(taskq_cli: Any, pg: PgTarget) -> None:
    waiting, done = asyncio.run(_big_jobs(pg))
    env = pg.env()
    for args in (
        ("jobs", "list"),
        ("jobs", "list", "--json"),
        ("jobs", "list", "--status", "succeeded"),
    ):
        result = taskq_cli(*args, env=env)
        assert result.exit_code == 0, result.stderr
        assert len(result.stdout) < SMALL, (args, len(result.stdout))
        assert "ppppp" not in result.stdout
    shown = taskq_cli("jobs", "show", str(done.id), env=env)
    assert shown.exit_code == 0, shown.stderr
    assert len(shown.stdout) < SMALL, len(shown.stdout)
    assert "q" * (PREVIEW_CHARS // 2) in shown.stdout  # the payload's first characters
    assert f"taskq jobs show {done.id} --full" in shown.stdout
    assert f"{BIG:,} bytes" in shown.stdout
    full = taskq_cli("jobs", "show", str(done.id), "--full", env=env)
    assert full.exit_code == 0, full.stderr
    assert "q" * (BIG - _WRAPPING) in full.stdout and "r" * (BIG - _WRAPPING) in full.stdout
    document = json.loads(taskq_cli("jobs", "show", str(waiting.id), "--json", env=env).stdout)
    assert document["job"]["payload"] == payload_of(BIG, "p")  # --json: the whole values


async def test_the_web_ui_stays_small_with_the_whole_value_one_link_away(pg: PgTarget) -> None:
    waiting, done = await _big_jobs(pg)
    async with open_ui(pg) as ui:
        for path in ("/jobs", "/jobs?status=succeeded", "/api/jobs", "/", "/batches"):
            answer = await ui.client.get(path)
            assert answer.status_code == 200, path
            assert len(answer.content) < SMALL, (path, len(answer.content))
        for path in (f"/jobs/{done.id}", f"/jobs/{done.id}?part=live"):
            page = await ui.client.get(path)
            assert page.status_code == 200
            assert len(page.content) < SMALL, (path, len(page.content))
            html = page.text
            assert "q" * (PREVIEW_CHARS // 2) in html and "r" * (PREVIEW_CHARS // 2) in html
            assert f'href="/jobs/{done.id}/payload"' in html
            assert f'href="/jobs/{done.id}/result"' in html
            assert f"{BIG:,} bytes" in html and "Showing the first" in html
        payload = await ui.client.get(f"/jobs/{done.id}/payload")
        assert payload.status_code == 200
        assert payload.headers["content-type"].startswith("application/json")
        assert "attachment" in payload.headers["content-disposition"]
        assert payload.json() == payload_of(BIG, "q")
        result = await ui.client.get(f"/jobs/{done.id}/result")
        assert result.json() == payload_of(BIG, "r")
        no_result = await ui.client.get(f"/jobs/{waiting.id}/result")
        assert no_result.status_code == 404
        assert (await ui.client.get(f"/jobs/{uuid4()}/payload")).status_code == 404
