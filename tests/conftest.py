"""Shared fixtures: one PostgreSQL server per session, a fresh migrated schema per test.

``TASKQ_TEST_DSN`` points the suite at an existing server; otherwise one embedded server is
started for the session, tuned for tests (no fsync), and removed at the end.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog

from chaos.pgbouncer import PgBouncer, PgBouncerUnavailable
from chaos.pgserver import tune_for_tests
from taskq_core import embedded
from taskq_core.obs.logs import reset_logging
from tests.schema_pool import (
    close_kept_connections,
    create_migrated_schema,
    drop_schema,
    drop_spare_schemas,
    give_back,
    new_schema_name,
    take_schema,
)

TASKQ_BIN = str(Path(sys.executable).parent / "taskq")


@dataclass(frozen=True)
class PgTarget:
    """A database a test may use: the server DSN and the test's own schema."""

    dsn: str
    schema: str

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a `taskq` subprocess aimed at this schema."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
        base.update(TASKQ_PG_DSN=self.dsn, TASKQ_SCHEMA_NAME=self.schema, NO_COLOR="1")
        base.update(extra)
        return base


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files all of whose tests are ``slow`` first (the most of them first), the rest in
    their order. Under ``--dist loadfile --no-loadscope-reorder`` (``make test``) the test
    processes take files in this order, so the long end-to-end files, mostly waiting on real
    processes, run while the others keep the cores busy, instead of one ending the run alone."""
    tests = Counter(item.path for item in items)
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: (slow[item.path] < tests[item.path], -slow[item.path]))


# A suite started in the background (an asynchronous command of a non-interactive shell)
# inherits SIGINT ignored, and every process it starts would ignore Ctrl-C too: the tests
# that send it need the default. A handler set here is reset to the default in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def fresh_logging() -> Iterator[None]:
    """Each test starts with structlog's defaults: an in-process CLI run configures logging
    at WARNING, which would otherwise hide the info events a later test captures (and puts
    its stdlib handler on the root logger, taken off again here)."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()
    reset_logging()


def _start_embedded_server(attempts: int = 3) -> tuple[Path, str]:
    """A new embedded server in a directory of its own. Run as root, initdb fails now and then
    with "could not change permissions of directory" on the directory the wheel has just
    given to its own user (seen once in a fresh clone's suite, never alone): a failed start
    is tried again in a new directory rather than failing every test of this test process."""
    for attempt in range(1, attempts + 1):
        root = Path(tempfile.mkdtemp(prefix="taskq-test-pg-"))
        try:
            return root, embedded.ensure_server(root / "pgdata")
        except Exception as error:
            shutil.rmtree(root, ignore_errors=True)
            if attempt == attempts:
                raise
            print(f"embedded server start {attempt} failed, trying again: {error}", file=sys.stderr)
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def pg_server_dsn() -> Iterator[str]:
    """DSN of the session's PostgreSQL server."""
    given = os.environ.get("TASKQ_TEST_DSN")
    if given:
        yield given
        asyncio.run(drop_spare_schemas())  # the server outlives the session
        close_kept_connections()
        return
    root, dsn = _start_embedded_server()
    data_dir = root / "pgdata"
    tune_for_tests(dsn)
    try:
        yield dsn
    finally:
        close_kept_connections()
        embedded.stop(data_dir)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pgbouncer(pg_server_dsn: str) -> Iterator[PgBouncer]:
    """A real PgBouncer in transaction mode in front of the session's server, started on
    first use (installed first when missing and this runs as root), stopped at the end."""
    try:
        bouncer = PgBouncer(pg_server_dsn, Path(tempfile.mkdtemp(prefix="taskq-pgbouncer-")))
        bouncer.start()
    except PgBouncerUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield bouncer
    finally:
        bouncer.stop()
        shutil.rmtree(bouncer.root, ignore_errors=True)


@pytest.fixture
async def pg(pg_server_dsn: str, request: pytest.FixtureRequest) -> AsyncIterator[PgTarget]:
    """A migrated schema of the test's own: new, or emptied after an earlier test
    (``tests.schema_pool``); a new one for a test marked ``fresh_schema``."""
    if request.node.get_closest_marker("fresh_schema"):
        schema = await create_migrated_schema(pg_server_dsn)
        yield PgTarget(pg_server_dsn, schema)
        await drop_schema(pg_server_dsn, schema)
        return
    schema = await take_schema(pg_server_dsn)
    yield PgTarget(pg_server_dsn, schema)
    await give_back(pg_server_dsn, schema)


@pytest.fixture
async def empty_schema(pg_server_dsn: str) -> AsyncIterator[PgTarget]:
    """A schema name that does not exist yet (for migration tests), dropped afterwards."""
    schema = new_schema_name()
    yield PgTarget(pg_server_dsn, schema)
    await drop_schema(pg_server_dsn, schema)


@dataclass
class CliResult:
    """What one in-process `taskq` run produced."""

    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def taskq_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> Iterator[object]:
    """Run `taskq ARGS...` in-process with a clean TASKQ_* environment; returns CliResult."""
    from taskq_cli.app import run

    for key in list(os.environ):
        if key.startswith("TASKQ_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.chdir(tmp_path)
    # An exporter thread an earlier test's telemetry left retrying (its collector gone) logs
    # on its own clock: its lines are not the command's output, whose stderr tests count.
    monkeypatch.setattr(logging.getLogger("opentelemetry"), "propagate", False)

    def invoke(*args: str, env: dict[str, str] | None = None) -> CliResult:
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        code = run(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    yield invoke
