"""Terminal escape injection (issue 33, item 1): database text reaches the operator's terminal
with its control characters shown, never sent.

Much of what a job carries comes from an application's end users: its payload, the error an
actor raises about it, the progress it reports, the names of queues, schedules and actors.
The issue's payloads (cursor up and erase line, an OSC 52 clipboard write, an OSC 0 window
title), a C1 CSI and a RIGHT-TO-LEFT OVERRIDE go through real rows into every command that
renders database text and into ``taskq top``: no output may carry one raw, and the escaped
form (``\\x1b``, ``\\u202e``: taskq_core/terminal_text.py) must be where the text was. NUL and
lone surrogates, which PostgreSQL cannot store, go through the in-memory backend into the
dashboard, and through a command-line argument into an error line. ``--json`` stays exact.

The behavioural tests import nothing added by the fix, so they run (and fail) against the code
before it; the structural tests at the end hold every command and widget to the rule.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
import typer

from taskq_cli.dashboard.source import BackendSource
from taskq_cli.tui.widgets.confirm import ConfirmScreen
from taskq_cli.tui.widgets.explain import ExplainScreen
from taskq_cli.tui.widgets.job_detail import JobDetailScreen
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import (
    ActorDeclaration,
    Backend,
    EnqueueArgs,
    ErrorInfo,
    Start,
    WorkerInfo,
)
from taskq_core.backend.protocol.schedules import ScheduleSpec
from taskq_core.backend.protocol.workflows import (
    WORKFLOW_ID_KEY,
    WORKFLOW_STEP_KEY,
    NewStep,
    NewWorkflow,
)
from taskq_core.clock import FakeClock
from taskq_core.ids import uuid7
from taskq_core.progress import ProgressReport
from tests.batch_seed import make_batch, settle_child
from tests.cli.conftest import Db
from tests.cli.test_narrow_tables_cli import on_a_terminal
from tests.conftest import CliResult, PgTarget, create_migrated_schema, drop_schema
from tests.tui.conftest import WIDE, screen_text, settle, top_app
from tests.tui.test_top_app import select_row

pytestmark = pytest.mark.postgres

CURSOR_UP_ERASE = "\x1b[1A\x1b[2K"
CLIPBOARD = "\x1b]52;c;dG91Y2ggL3RtcC9wd25lZA==\x1b\\"  # OSC 52: "touch /tmp/pwned"
TITLE = "\x1b]0;all green\x1b\\"  # OSC 0: the window title
C1_CSI = "\x9b2J"  # the one-byte CSI: erase the screen
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE
HOSTILE = CURSOR_UP_ERASE + CLIPBOARD + TITLE + C1_CSI + RLO
# The same text as the operator reads it (written out: the fix's function is not the oracle).
SHOWN = (
    r"\x1b[1A\x1b[2K"
    r"\x1b]52;c;dG91Y2ggL3RtcC9wd25lZA==\x1b" + "\\"
    r"\x1b]0;all green\x1b" + "\\"
    r"\x9b2J\u202e"
)
# A payload's text as `jobs show` prints it: compact JSON (which escapes C0 itself), then the
# escaped form for what JSON leaves (C1, the override).
SHOWN_IN_JSON = (
    r"\u001b[1A\u001b[2K"
    r"\u001b]52;c;dG91Y2ggL3RtcC9wd25lZA==\u001b\\"
    r"\u001b]0;all green\u001b\\"
    r"\x9b2J\u202e"
)
# What must never reach the terminal: C0 but newline, C1, DEL, bidi overrides, surrogates.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
NO_DELAY = {"TASKQ_RECLAIM_EVENT_VISIBILITY_DELAY": "0"}
LEASE = timedelta(minutes=5)

# Names are written under these and renamed by SQL afterwards: rows that predate any check
# on names at creation (the dashboard and commands must show them safely all the same).
QUEUE_SEED, ACTOR_SEED, SCHEDULE_SEED = "seed-queue", "seed-actor", "seed-schedule"


def hostile(field: str) -> str:
    """The hostile text, tagged with the field that carries it."""
    return f"{field}:{HOSTILE}"


def shown(field: str) -> str:
    """How ``hostile(field)`` must read."""
    return f"{field}:{SHOWN}"


QUEUE, ACTOR, SCHEDULE = hostile("queue"), hostile("actor"), hostile("schedule")
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "app/signup.py", line 12, in signup\n'
    "    raise ValueError(f\"invalid email address: {payload['email']}\")\n"
    f"ValueError: {hostile('traceback')}\n"
)


def assert_nothing_raw(text: str, where: str) -> None:
    """No character a terminal would act on (newline and tab aside)."""
    found = RAW.search(text)
    if found is not None:
        around = text[max(found.start() - 40, 0) : found.start() + 20]
        raise AssertionError(f"{where}: raw {found.group()!r} reaches the terminal: {around!r}")


# --- the rows -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hostile:
    """A schema whose rows carry the hostile text everywhere an application puts text."""

    pg: PgTarget
    failed: UUID  # payload, metadata, progress message, error, traceback, attempt
    cancelled: UUID  # the cancel reason
    pending: UUID  # waiting in the paused queue: what jobs explain explains
    reclaimed: UUID  # reclaimed once: the reclaim feed
    batch: UUID  # active, one child failed with the hostile error
    workflow: UUID  # its name and a step's name hostile; that step failed, its dependent waits
    worker: UUID  # label and hostname


async def _seed(backend: Backend) -> dict[str, UUID]:
    worker = uuid4()
    await backend.register_worker(
        WorkerInfo(
            worker, hostile("host"), 4242, [QUEUE_SEED], [ACTOR_SEED], 4, label=hostile("label")
        )
    )
    await backend.sync_actor_configs(
        [ActorDeclaration(ACTOR_SEED, QUEUE_SEED, {}, None, None, None)], force=False
    )
    failed = await backend.enqueue(
        EnqueueArgs(
            actor=ACTOR_SEED,
            queue=QUEUE_SEED,
            payload={"email": hostile("payload")},
            metadata={"origin": hostile("metadata")},
            max_attempts=1,
            priority=1000,
        )
    )
    [claimed] = await backend.dispatch_batch(worker, [QUEUE_SEED], 1, LEASE)
    await backend.mark_started_many(worker, [Start(failed.id, claimed.attempt)])
    report = ProgressReport(failed.id, 1, 3, 10, hostile("progress"), datetime.now(UTC))
    assert await backend.write_progress(claimed.lease(), report.seq, report.state())
    error = ErrorInfo("ValueError", hostile("error"), TRACEBACK)
    await backend.mark_failed_or_retry(claimed.lease(), error, None, ran_for=0.1)

    workflow = await _seed_workflow(backend, worker, error)

    batch = await make_batch(backend, queue=QUEUE_SEED, size=2, finalizer=ACTOR_SEED)
    await settle_child(backend, batch, "failed", error=hostile("child"))

    reclaimed = await backend.enqueue(
        EnqueueArgs(actor=ACTOR_SEED, queue=QUEUE_SEED, max_attempts=3, priority=1000)
    )
    [claimed] = await backend.dispatch_batch(worker, [QUEUE_SEED], 1, LEASE)
    assert claimed.id == reclaimed.id
    await backend.mark_started_many(worker, [Start(reclaimed.id, claimed.attempt)])

    cancelled = await backend.enqueue(EnqueueArgs(actor=ACTOR_SEED, queue=QUEUE_SEED))
    assert await backend.write_cancel_request(cancelled.id, hostile("cancel")) == "cancelled"
    await backend.create_schedule(
        ScheduleSpec(SCHEDULE_SEED, ACTOR_SEED, "*/5 * * * *", payload={"to": hostile("payload")})
    )
    pending = await backend.enqueue(EnqueueArgs(actor=ACTOR_SEED, queue=QUEUE_SEED))
    await backend.update_queue(
        QUEUE_SEED, paused=True, paused_by="ops@node-a", pause_reason=hostile("pause")
    )
    return {
        "failed": failed.id,
        "cancelled": cancelled.id,
        "pending": pending.id,
        "reclaimed": reclaimed.id,
        "batch": batch.id,
        "workflow": workflow,
        "worker": worker,
    }


async def _seed_workflow(backend: Backend, worker: UUID, error: ErrorInfo) -> UUID:
    """A workflow named hostile, whose first step (named hostile) failed and whose second
    waits on it (the release has not run: the step still waits)."""
    workflow_id = uuid7()

    def step(name: str, *after: UUID) -> NewStep:
        metadata = {WORKFLOW_ID_KEY: str(workflow_id), WORKFLOW_STEP_KEY: name}
        args = EnqueueArgs(
            actor=ACTOR_SEED, queue=QUEUE_SEED, job_id=uuid7(), metadata=metadata,
            waiting=bool(after), max_attempts=1, priority=1000,
        )  # fmt: skip
        return NewStep(args, name, after)

    first = step(hostile("step"))
    assert first.args.job_id is not None
    await backend.create_workflow(
        NewWorkflow(workflow_id, hostile("workflow")), [first, step("join", first.args.job_id)]
    )
    [claimed] = await backend.dispatch_batch(worker, [QUEUE_SEED], 1, LEASE)
    assert claimed.id == first.args.job_id
    await backend.mark_started_many(worker, [Start(claimed.id, claimed.attempt)])
    await backend.mark_failed_or_retry(claimed.lease(), error, None, ran_for=0.1)
    return workflow_id


# (statement, the names it binds): $1 the hostile name, $2 the one it was seeded under.
_RENAMES = (
    ("UPDATE {schema}.jobs SET queue = $1 WHERE queue = $2", QUEUE, QUEUE_SEED),
    ("UPDATE {schema}.jobs SET actor = $1 WHERE actor = $2", ACTOR, ACTOR_SEED),
    ("UPDATE {schema}.queues SET name = $1 WHERE name = $2", QUEUE, QUEUE_SEED),
    ("UPDATE {schema}.actor_config SET queue = $1 WHERE queue = $2", QUEUE, QUEUE_SEED),
    ("UPDATE {schema}.actor_config SET actor = $1 WHERE actor = $2", ACTOR, ACTOR_SEED),
    ("UPDATE {schema}.batches SET queue = $1 WHERE queue = $2", QUEUE, QUEUE_SEED),
    (
        "UPDATE {schema}.batches SET finalizer = "
        "jsonb_set(finalizer, '{actor}', to_jsonb($1::text)) WHERE finalizer->>'actor' = $2",
        ACTOR,
        ACTOR_SEED,
    ),
    ("UPDATE {schema}.schedules SET name = $1 WHERE name = $2", SCHEDULE, SCHEDULE_SEED),
    ("UPDATE {schema}.schedules SET actor = $1 WHERE actor = $2", ACTOR, ACTOR_SEED),
    ("UPDATE {schema}.workers SET queues = array_replace(queues, $2, $1)", QUEUE, QUEUE_SEED),
    ("UPDATE {schema}.workers SET actors = array_replace(actors, $2, $1)", ACTOR, ACTOR_SEED),
)


def seed_hostile(pg: PgTarget) -> Hostile:
    """The hostile rows in ``pg``'s schema (the reclaimed job's lease expired and swept)."""
    db = Db(pg)
    ids = db.call(_seed)
    for statement, name, seeded_as in _RENAMES:
        db.sql(statement, name, seeded_as)
    db.sql(
        "UPDATE {schema}.jobs SET lock_expires_at = clock_timestamp() - interval '1 second' "
        "WHERE id = $1",
        ids["reclaimed"],
    )
    assert db.call(lambda b: b.reclaim_expired_leases(timedelta(0), timedelta(0))) == 1
    # Old enough for `prune --dry-run` to count it.
    db.sql(
        "UPDATE {schema}.jobs SET finished_at = finished_at - interval '30 days' WHERE id = $1",
        ids["failed"],
    )
    return Hostile(pg, **ids)


@pytest.fixture(scope="module")
def hostile_rows(pg_server_dsn: str) -> Iterator[Hostile]:
    """One seeded schema for the read-only commands (they change nothing)."""
    schema = asyncio.run(create_migrated_schema(pg_server_dsn))
    try:
        yield seed_hostile(PgTarget(pg_server_dsn, schema))
    finally:
        asyncio.run(drop_schema(pg_server_dsn, schema))


Cli = Callable[..., CliResult]


@pytest.fixture
def run_on(taskq_cli: Any) -> Callable[[PgTarget], Cli]:
    """``run_on(pg)(*args)``: taskq in-process against that schema."""

    def bind(pg: PgTarget) -> Cli:
        def run(*args: str, env: dict[str, str] | None = None) -> CliResult:
            result: CliResult = taskq_cli(*args, env={**pg.env(), **NO_DELAY, **(env or {})})
            return result

        return run

    return bind


@pytest.fixture(params=["piped", "terminal"])
def shape(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a command renders: for a pipe (plain columns) and for a terminal (fitted
    tables, wrapping; wide enough that nothing wraps, and no colour codes to tell apart)."""
    if request.param == "terminal":
        from taskq_cli import output

        def console(**kwargs: Any) -> Any:
            kind = type(output.stdout)  # the console class the module uses
            return kind(force_terminal=True, color_system=None, width=400, **kwargs)

        monkeypatch.setattr(output, "stdout", console(soft_wrap=True))
        monkeypatch.setattr(output, "stderr", console(stderr=True, soft_wrap=True))
    return str(request.param)


# --- every command that renders database text --------------------------------------------------

# (arguments, {ids} filled in; what must read escaped: the tags of the fields the command shows,
# a name quoted with repr, which escapes it by itself, or ``json:tag`` inside a JSON text).
READS: list[tuple[list[str], list[str]]] = [
    (["jobs", "list"], ["queue", "actor", "error"]),
    (["jobs", "list", "-o", "wide"], ["queue", "actor", "error"]),
    (
        ["jobs", "show", "{failed}"],
        ["queue", "actor", "json:payload", "json:metadata", "progress", "error", "traceback"],
    ),
    (["jobs", "show", "{cancelled}"], ["cancel"]),
    (["jobs", "show", "{reclaimed}"], ["queue", "actor"]),
    (["jobs", "explain", "{pending}"], [repr(ACTOR), repr(QUEUE), "pause"]),
    (["jobs", "explain", "{failed}"], [repr(QUEUE)]),
    (["jobs", "reclaims"], ["queue", "actor"]),
    (["jobs", "reclaims", "--follow", "--after", "0", "--limit", "1"], ["queue", "actor"]),
    (["batches", "list"], ["queue", "actor"]),
    (["batches", "show", "{batch}"], ["queue", "actor", "child"]),
    (["workflows", "list"], ["workflow"]),
    (["workflows", "show", "{workflow}"], ["workflow"]),  # the steps table wraps the rest
    (["schedules", "list"], ["schedule", "actor"]),
    (["schedules", "show", SCHEDULE], ["schedule", "actor", "json:payload"]),
    (["workers", "list"], ["label", "host", "queue"]),
    (["queues", "list"], ["queue", "pause"]),
    (["actor-config", "list"], ["actor", "queue"]),
    (["actor-config", "get", ACTOR], ["actor", "queue"]),
    (["prune", "--dry-run", "--older-than", "7d"], ["queue"]),
]
# The commands that change rows, in this order on one schema: (arguments, exit code, what
# must read escaped). The ones that print ids and counts only must still print nothing raw,
# and a refused name is quoted by its error line.
CHANGES: list[tuple[list[str], int, list[str]]] = [
    (["queues", "resume", QUEUE], 0, [repr(QUEUE)]),
    (["queues", "pause", QUEUE, "--reason", "deploy"], 0, [repr(QUEUE)]),
    (["queues", "set-mode", QUEUE, "round_robin"], 0, [repr(QUEUE)]),
    (["queues", "set-max-concurrent", QUEUE, "3"], 0, [repr(QUEUE)]),
    (["schedules", "disable", SCHEDULE], 0, [repr(SCHEDULE)]),
    (["schedules", "enable", SCHEDULE], 0, [repr(SCHEDULE)]),
    # The actor's stored queue predates the name rule: a new job there is refused, escaped.
    (["schedules", "run", SCHEDULE], 1, []),
    (["actor-config", "set", ACTOR, "--max-concurrent", "3"], 0, ["actor"]),
    (["actor-config", "diff", "--actors", "hostile_registry:registry"], 1, ["queue"]),
    (["jobs", "move", "{pending}", "--to", "elsewhere"], 0, [repr(QUEUE)]),
    (["jobs", "requeue", "{failed}"], 1, []),
    (["jobs", "fail", "{pending}"], 1, []),
    (["retry", "{failed}"], 0, []),
    (["cancel", "{failed}"], 0, []),
    (["jobs", "purge", "--status", "cancelled", "--yes"], 0, []),
    (["workflows", "cancel", "{workflow}"], 0, []),
    (["workflows", "retry", "{workflow}"], 0, []),
    (["workers", "ack", "{worker}"], 1, []),  # a live worker raises no alert: refused
    (["schedules", "delete", SCHEDULE], 0, [repr(SCHEDULE)]),
    (["enqueue", ACTOR], 1, []),
    (["schedules", "add", SCHEDULE, "x", "* * * * *"], 1, []),
]


def _argv(args: list[str], rows: Hostile) -> list[str]:
    """``args`` with ``{failed}`` and the like replaced by the ids of ``rows``."""
    ids = {key: str(value) for key, value in vars(rows).items() if key != "pg"}
    return [arg.format(**ids) if arg.startswith("{") else arg for arg in args]


def _expected(marks: list[str]) -> list[str]:
    """Tags as they read; a quoted name as repr quotes it; ``json:tag`` inside a JSON text."""
    return [
        mark
        if mark.startswith("'")
        else f"{mark[5:]}:{SHOWN_IN_JSON}"
        if mark.startswith("json:")
        else shown(mark)
        for mark in marks
    ]


@pytest.mark.parametrize(
    ("args", "marks"),
    READS,
    ids=[" ".join(args) for args, _ in READS],
)
def test_commands_show_database_text_escaped(
    hostile_rows: Hostile,
    run_on: Callable[[PgTarget], Cli],
    shape: str,
    args: list[str],
    marks: list[str],
) -> None:
    result = run_on(hostile_rows.pg)(*_argv(args, hostile_rows))
    assert result.exit_code == 0, result.stderr
    assert_nothing_raw(result.stdout, "stdout")
    assert_nothing_raw(result.stderr, "stderr")
    flat = result.stdout.replace("\n", "")  # a terminal's table may fold a long cell
    for expected in _expected(marks):
        assert expected in result.stdout or expected in flat, (expected, result.stdout)


def test_json_keeps_every_value_exact(
    hostile_rows: Hostile, run_on: Callable[[PgTarget], Cli]
) -> None:
    cli = run_on(hostile_rows.pg)
    shown_job = cli("jobs", "show", str(hostile_rows.failed), "--json")
    workers = cli("workers", "list", "--json")
    for result in (shown_job, workers):
        assert result.exit_code == 0, result.stderr
        assert_nothing_raw(result.stdout, "--json")  # JSON escapes them itself (\u001b)
    job = json.loads(shown_job.stdout)
    assert job["job"]["queue"] == QUEUE and job["job"]["actor"] == ACTOR
    assert job["job"]["error_message"] == hostile("error")
    assert job["job"]["error_traceback"] == TRACEBACK
    assert job["job"]["payload"] == {"email": hostile("payload")}
    assert job["progress"]["message"] == hostile("progress")
    [worker] = json.loads(workers.stdout)["workers"]
    assert worker["label"] == hostile("label") and worker["queues"] == [QUEUE]


def test_jobs_show_on_a_real_terminal_sends_no_control_character(hostile_rows: Hostile) -> None:
    # A pty, as an operator runs it (the terminal's own codes, bold headers, removed).
    text = on_a_terminal(hostile_rows.pg, "jobs", "show", str(hostile_rows.failed), columns=200)
    assert_nothing_raw(re.sub(r"\x1b\[[0-9;]*m", "", text).replace("\r", ""), "pty")
    assert shown("error") in text.replace("\n", "")


def test_commands_that_change_rows_show_their_names_escaped(
    pg: PgTarget, run_on: Callable[[PgTarget], Cli], tmp_path: Path
) -> None:
    rows = seed_hostile(pg)
    cli = run_on(pg)
    # For actor-config diff: the code's resize on media, its stored row on the hostile queue.
    (tmp_path / "hostile_registry.py").write_text(
        "from taskq_core import actor\n\n"
        "@actor(queue='media')\n"
        "async def resize(payload: dict) -> None: ...\n\n"
        "registry = [resize]\n"
    )
    Db(pg).register_actor("resize", queue="media")
    Db(pg).sql("UPDATE {schema}.actor_config SET queue = $1 WHERE actor = 'resize'", QUEUE)
    for args, code, marks in CHANGES:
        result = cli(*_argv(args, rows))
        assert result.exit_code == code, (args, result.stdout, result.stderr)
        assert_nothing_raw(result.stdout, f"{args}: stdout")
        assert_nothing_raw(result.stderr, f"{args}: stderr")
        for text in _expected(marks):
            assert text in result.stdout + result.stderr, (args, text, result)


def test_an_error_line_shows_what_it_quotes_escaped(
    hostile_rows: Hostile, run_on: Callable[[PgTarget], Cli]
) -> None:
    cli = run_on(hostile_rows.pg)
    # A stray argument is quoted as given; a lone surrogate is what Python makes of a byte
    # that is not UTF-8 in argv.
    stray = cli("jobs", "list", f"extra{HOSTILE}\udcff\x00")
    assert stray.exit_code == 1
    assert_nothing_raw(stray.stderr, "usage error")
    assert f"extra{SHOWN}\\udcff\\x00" in stray.stderr
    debug = cli("--debug", "jobs", "list", f"extra{HOSTILE}")  # the traceback quotes it too
    assert debug.exit_code == 1 and "Traceback" in debug.stderr
    assert_nothing_raw(debug.stderr, "--debug")
    assert debug.stderr.count(f"extra{SHOWN}") == 2, debug.stderr
    unknown = cli("queues", "set-mode", "nosuchqueue", "round_robin")
    assert unknown.exit_code == 1
    assert_nothing_raw(unknown.stderr, "unknown queue")
    assert repr(QUEUE) in unknown.stderr  # the known queues it lists


# --- taskq top ---------------------------------------------------------------------------------


async def _screens(app: Any, pilot: Any, job: UUID) -> dict[str, str]:
    """The dashboard's main screen, a job's detail and explanation, the queue's jobs and the
    resume dialog, as the terminal shows them."""
    seen: dict[str, str] = {}
    await settle(pilot)
    seen["main"] = "\n".join(screen_text(app))
    await select_row(app.jobs_pane.table, str(job))
    await pilot.press("enter")
    await settle(pilot)
    assert isinstance(app.screen, JobDetailScreen)
    seen["detail"] = "\n".join(screen_text(app))
    scroll = app.screen.query_one("#detail-body")
    scroll.scroll_end(animate=False)
    await settle(pilot)
    seen["detail, scrolled"] = "\n".join(screen_text(app))
    await pilot.press("e")
    await settle(pilot)
    assert isinstance(app.screen, ExplainScreen)
    seen["explain"] = "\n".join(screen_text(app))
    await pilot.press("escape", "escape")
    await settle(pilot)
    app.queues_table.focus()
    await select_row(app.queues_table, QUEUE)
    await pilot.press("enter")  # the jobs pane lists the queue's jobs: its title names it
    await settle(pilot)
    seen["queue's jobs"] = "\n".join(screen_text(app))
    app.queues_table.focus()
    await pilot.press("p")
    await settle(pilot)
    assert isinstance(app.screen, ConfirmScreen)
    seen["resume dialog"] = "\n".join(screen_text(app))
    await pilot.press("y")  # resumed: a toast says so
    app.jobs_pane.notify(hostile("toast"), title=hostile("title"), markup=False)
    await settle(pilot)
    seen["toasts"] = "\n".join(f"{n.title}: {n.message}" for n in app._notifications)
    return seen


async def test_top_shows_database_text_escaped_on_every_screen(hostile_rows: Hostile) -> None:
    pg = hostile_rows.pg
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=3)
    try:
        app = top_app(BackendSource(backend, database="test", schema=pg.schema))
        async with app.run_test(size=(240, 60)) as pilot:
            seen = await _screens(app, pilot, hostile_rows.failed)
            # Resuming changed the queue; put the pause back for the other tests.
            await backend.update_queue(
                QUEUE, paused=True, paused_by="ops@node-a", pause_reason=hostile("pause")
            )
    finally:
        await backend.close()
    for name, text in seen.items():
        assert_nothing_raw(text, name)
    everything = "\n".join(seen.values())
    for tag in ("queue", "actor", "label", "host", "error", "traceback", "progress", "pause"):
        assert shown(tag)[:40] in everything, tag
    assert f"payload:{SHOWN_IN_JSON}"[:40] in seen["detail"]
    assert f"{shown('title')}: {shown('toast')}" in seen["toasts"]
    dialog = seen["resume dialog"]
    assert repr(QUEUE)[:20] in dialog and shown("pause")[:30] in dialog  # (the dialog wraps)


async def test_top_shows_nul_and_lone_surrogates_escaped() -> None:
    # Rows PostgreSQL could not hold: the in-memory backend keeps any Python string.
    clock = FakeClock()
    backend = InMemoryBackend(clock=clock)
    odd = f"nul\x00 surrogate\ud800 {HOSTILE}"
    worker = uuid4()
    await backend.register_worker(
        WorkerInfo(worker, "host", 1, ["media"], ["resize"], 2, label=f"label:{odd}")
    )
    # (JSON cannot hold a NUL: the payload carries the rest.)
    payload = {"v": odd.replace("\x00", "")}
    job = await backend.enqueue(EnqueueArgs("resize", queue="media", payload=payload))
    [claimed] = await backend.dispatch_batch(worker, ["media"], 1, LEASE)
    await backend.mark_started_many(worker, [Start(job.id, claimed.attempt)])
    error = ErrorInfo("ValueError", f"error:{odd}", f"Traceback:\nValueError: {odd}\n")
    await backend.mark_failed_or_retry(claimed.lease(), error, None, ran_for=0.0)
    app = top_app(BackendSource(backend, database="memory", schema="public"))
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        main = "\n".join(screen_text(app))
        await pilot.press("enter")
        await settle(pilot)
        detail = "\n".join(screen_text(app))
    await backend.close()
    for name, text in (("main", main), ("detail", detail)):
        assert_nothing_raw(text, name)
        assert r"nul\x00 surrogate\ud800" in text, name
    assert f"label:nul\\x00 surrogate\\ud800 {SHOWN}"[:40] in main


# --- the other places text leaves for a terminal -------------------------------------------------


def test_the_worker_console_log_shows_control_characters_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import logging

    import structlog

    from taskq_core.obs.logs import configure_logging, reset_logging

    configure_logging(fmt="console", level="INFO")
    try:
        structlog.get_logger().warning(f"sending to {HOSTILE}", actor=ACTOR, key="k\x1b[2Kv")
        logging.getLogger("app").warning("actor says %s", hostile("stdlib"))
        try:
            raise ValueError(hostile("traceback"))
        except ValueError:
            structlog.get_logger().exception("job_failed")
    finally:
        reset_logging()
    err = capsys.readouterr().err
    assert_nothing_raw(err, "console log")
    # (The renderer writes a value with a space as its repr, which escapes it by itself.)
    for text in (f"sending to {SHOWN}", r"key=k\x1b[2Kv", shown("stdlib"), shown("traceback")):
        assert text in err, text


class _CannedHealthServer:
    """A Unix socket that answers any request with one canned /metrics body."""

    def __init__(self, path: Path, body: str) -> None:
        self.path = path
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(1)
        self._listener.settimeout(10)
        response = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n{body}"
        self._response = response.encode()
        self._thread = threading.Thread(target=self._answer, daemon=True)
        self._thread.start()

    def _answer(self) -> None:
        try:
            connection, _ = self._listener.accept()
        except OSError:
            return  # nobody asked: the test says why
        with connection:
            connection.recv(4096)
            connection.sendall(self._response)

    def close(self) -> None:
        self._thread.join(10)
        self._listener.close()


def test_health_metrics_on_a_terminal_shows_a_queue_label_escaped(
    taskq_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = f'taskq_pruned_jobs_total{{queue="{QUEUE}"}} 1\n'
    server = _CannedHealthServer(tmp_path / "health.sock", body)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    try:
        result = taskq_cli("health", "metrics", "--socket", str(server.path))
    finally:
        server.close()
    assert result.exit_code == 0, result.stderr
    assert_nothing_raw(result.stdout, "health metrics")
    assert shown("queue") in result.stdout


# --- the structure that keeps new code from missing it -------------------------------------------

# Commands that print no database text, and where the rest are checked.
NOT_DATABASE_TEXT = {
    "worker": "its console log: test_the_worker_console_log_shows_control_characters_escaped",
    "top": "the dashboard: the test_top_* tests",
    "health live": "a JSON body (ensure_ascii) from the worker",
    "health ready": "a JSON body (ensure_ascii) from the worker",
    "health metrics": "test_health_metrics_on_a_terminal_shows_a_queue_label_escaped",
    "config": "settings from the environment and .env, through print_table",
    "migrate up": "migration file names",
    "migrate status": "migration file names",
    "embedded start": "a data directory",
    "embedded status": "a data directory",
    "embedded stop": "a data directory",
    "metrics serve": "serves Prometheus text over HTTP, prints its URL",
    "ui serve": "serves HTML (Jinja escapes it), prints its URL",
    "workgroup check": "the operator's TOML file",
    "workgroup init": "writes a starter file",
    "workgroup start": "the operator's TOML file and its children",
    "workgroup status": "the supervisor's children",
    "workgroup stop": "the supervisor's children",
    "workgroup reload": "the supervisor's children",
    "workgroup restart": "the supervisor's children",
}


def _leaf_commands() -> list[str]:
    from taskq_cli.root import app

    root = typer.main.get_command(app)
    found: list[str] = []

    def walk(command: Any, path: list[str], ctx: Any) -> None:
        if not hasattr(command, "list_commands"):
            found.append(" ".join(path))
            return
        for name in command.list_commands(ctx):
            child = command.get_command(ctx, name)
            walk(child, [*path, name], child.context_class(child, parent=ctx, info_name=name))

    walk(root, [], root.context_class(root, info_name="taskq"))
    return found


def test_every_command_is_run_with_hostile_rows_or_says_why_not() -> None:
    run = [args for args, _ in READS] + [args for args, _, _ in CHANGES]
    missing = [
        command
        for command in _leaf_commands()
        if command not in NOT_DATABASE_TEXT
        and not any(args[: len(command.split())] == command.split() for args in run)
    ]
    assert missing == [], f"run these in READS or CHANGES (or say why not): {missing}"


def test_the_sanitiser_shows_exactly_the_characters_a_terminal_acts_on() -> None:
    from taskq_core.terminal_text import terminal_safe

    for code in [*range(0x2100), *range(0xD7F0, 0xE010)]:
        char = chr(code)
        out = terminal_safe(f"a{char}b")
        if RAW.match(char):
            form = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
            assert out == f"a{form}b", hex(code)
        else:
            assert out == f"a{char}b", hex(code)
    assert terminal_safe("line\r\nnext\tcell") == "line\r\nnext\tcell"  # CRLF ends a line


def test_the_consoles_drop_what_a_hand_built_renderable_still_carries(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rich.table import Table
    from rich.text import Text

    from taskq_cli import output

    table = Table("name")
    table.add_row(Text(f"raw{HOSTILE}\ud800"))  # not through print_table: no visible form
    for console in (output.stdout, output.stderr):
        console.print(table)
    captured = capsys.readouterr()
    for text in (captured.out, captured.err):
        assert_nothing_raw(text, "console")
        assert "raw[1A[2K]52;c;" in text  # dropped, not shown: the layout holds


async def test_the_dashboard_drops_what_a_plain_widget_still_carries() -> None:
    from textual.screen import Screen
    from textual.widgets import Static

    class Bare(Screen[None]):
        def compose(self) -> Any:
            yield Static(f"bare{HOSTILE}", markup=False)

    app = top_app(BackendSource(InMemoryBackend(), database="memory", schema="public"))
    async with app.run_test(size=(120, 20)) as pilot:
        await settle(pilot)
        await app.push_screen(Bare())
        await settle(pilot)
        text = "\n".join(screen_text(app))
    assert_nothing_raw(text, "bare Static")
    assert "bare[1A[2K]52;c;" in text


def _imported_names(path: Path) -> Iterator[tuple[str, int]]:
    """``module.name`` for every ``from module import name`` in a file, with its line."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                yield f"{node.module}.{alias.name}", node.lineno


def test_no_rendering_code_builds_its_own_console_or_plain_static() -> None:
    """Rich consoles come from taskq_cli.output (TerminalConsoles); the dashboard's text
    widgets are LiteralStatics. A module that imports ``Console``, ``Static`` or ``Label``
    itself would print database text around both (the web UI, HTML, is not a terminal)."""
    root = Path(__file__).resolve().parents[2] / "taskq_cli"
    allowed = {
        "rich.console.Console": "terminal_rich.py",
        "textual.widgets.Static": "literal.py",
        "textual.widgets.Label": "",
    }
    offenders = [
        f"{path.relative_to(root)}:{line}: {name}"
        for path in root.rglob("*.py")
        if path.relative_to(root).parts[0] != "ui"
        for name, line in _imported_names(path)
        if name in allowed and path.name != allowed[name]
    ]
    assert offenders == []
