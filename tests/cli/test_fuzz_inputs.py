"""Random text in every argument that takes user input: exit 0 or 1, never a traceback, and
never a partial write.

Each case puts hypothesis' text into one argument of one command (the others valid) and
compares a fingerprint of the schema (jobs, events, queues, actor_config) before and after.
A failure (exit 1) must be exactly one ``error:`` line and leave the fingerprint alone; a
success may only make the change the command promises (``enqueue`` adds exactly one job).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli.conftest import Db
from tests.conftest import CliResult, PgTarget

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

Cli = Callable[..., CliResult]
# Any text a shell could pass: every Unicode character except lone surrogates (argv is
# decoded text), NUL and control characters included.
RANDOM_TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)
# Near-misses and valid values, so success paths and parser edges get their share too.
EDGES = [
    "", " ", "0", "-1", "2147483648", "5m", "PT1H", "P", "1e400", "nan", "inf", "{}",
    '{"a": 1}', "[]", "null", '{"a": "\\u0000"}', '{"a": NaN}', "pending", "failed,cancelled",
    "round_robin", "default", "work", "--help", "-", "@", "@.", "a:b", "os:path", "x" * 300,
    "\x00", "[bold]", "[/x]", "00000000-0000-0000-0000-000000000000", "é\u200b\U0001f600",
]  # fmt: skip
TEXT = st.one_of(RANDOM_TEXT, st.sampled_from(EDGES))
# A job id that exists, so the id arguments reach the database with a real job.
JOB = "{job}"

# (command name, argv with "{text}" where the random text goes, whether success enqueues)
CASES: list[tuple[str, list[str], bool]] = [
    ("enqueue ACTOR", ["enqueue", "{text}"], True),
    ("enqueue --payload", ["enqueue", "work", "--payload={text}"], True),
    ("enqueue --queue", ["enqueue", "work", "--queue={text}"], True),
    ("enqueue --delay", ["enqueue", "work", "--delay={text}"], True),
    ("enqueue --priority", ["enqueue", "work", "--priority={text}"], True),
    ("enqueue --identity-key", ["enqueue", "work", "--identity-key={text}"], True),
    ("enqueue --fairness-key", ["enqueue", "work", "--fairness-key={text}"], True),
    ("enqueue --count", ["enqueue", "work", "--count={text}"], False),
    ("enqueue --actors", ["enqueue", "work", "--actors={text}"], True),
    ("jobs list --status", ["jobs", "list", "--status={text}"], False),
    ("jobs list --queue", ["jobs", "list", "--queue={text}"], False),
    ("jobs list --actor", ["jobs", "list", "--actor={text}"], False),
    ("jobs list --limit", ["jobs", "list", "--limit={text}"], False),
    ("jobs show ID", ["jobs", "show", "{text}"], False),
    ("jobs explain ID", ["jobs", "explain", "{text}"], False),
    ("cancel ID", ["cancel", "{text}"], False),
    ("cancel --reason", ["cancel", JOB, "--reason={text}"], False),
    ("cancel --queue", ["cancel", "--queue={text}"], False),
    ("cancel --actor", ["cancel", "--actor={text}", "--yes"], False),
    ("cancel --status", ["cancel", "--queue=default", "--status={text}", "--yes"], False),
    ("retry ID", ["retry", "{text}"], False),
    ("retry --status", ["retry", "--status={text}", "--yes"], False),
    ("retry --queue", ["retry", "--status=failed", "--queue={text}"], False),
    ("queues set-mode QUEUE", ["queues", "set-mode", "{text}", "round_robin"], False),
    ("queues set-mode MODE", ["queues", "set-mode", "default", "{text}"], False),
    ("queues set-max-concurrent N", ["queues", "set-max-concurrent", "default", "{text}"], False),
    ("queues pause QUEUE", ["queues", "pause", "{text}"], False),
    ("queues pause --create", ["queues", "pause", "{text}", "--create"], False),
    ("queues resume QUEUE", ["queues", "resume", "{text}"], False),
    ("actor-config get NAME", ["actor-config", "get", "{text}"], False),
    ("actor-config set NAME", ["actor-config", "set", "{text}", "--max-concurrent=3"], False),
    (
        "actor-config set --max-concurrent",
        ["actor-config", "set", "work", "--max-concurrent={text}"],
        False,
    ),
    (
        "actor-config set --max-pending",
        ["actor-config", "set", "work", "--max-pending={text}"],
        False,
    ),
    (
        "actor-config set --result-ttl",
        ["actor-config", "set", "work", "--result-ttl={text}"],
        False,
    ),
    ("actor-config diff --actors", ["actor-config", "diff", "--actors={text}"], False),
]

FINGERPRINT = """
SELECT
  (SELECT count(*) FROM {schema}.jobs) AS jobs,
  (SELECT count(*) FROM {schema}.job_events) AS events,
  (SELECT coalesce(string_agg(id::text || status::text || coalesce(cancel_reason, '')
                              || attempt::text, ',' ORDER BY id), '')
   FROM {schema}.jobs WHERE status <> 'pending' OR cancel_phase > 0) AS changed,
  (SELECT coalesce(string_agg(name || mode || coalesce(max_concurrent::text, '-')
                              || paused::text, ',' ORDER BY name), '')
   FROM {schema}.queues) AS queues,
  (SELECT coalesce(string_agg(actor || coalesce(max_concurrent::text, '-')
                              || coalesce(max_pending::text, '-')
                              || coalesce(result_ttl::text, '-'), ',' ORDER BY actor), '')
   FROM {schema}.actor_config) AS actors
"""


class Fingerprints:
    """One connection, on an event loop of its own, that reads the schema's fingerprint."""

    def __init__(self, pg: PgTarget) -> None:
        self.pg = pg
        self.loop = asyncio.new_event_loop()
        self.conn: asyncpg.Connection = self.loop.run_until_complete(asyncpg.connect(pg.dsn))
        self.query = FINGERPRINT.replace("{schema}", pg.schema)

    def read(self) -> dict[str, Any]:
        """What any write would change."""
        record = self.loop.run_until_complete(self.conn.fetchrow(self.query))
        assert record is not None
        return dict(record)

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


@pytest.fixture
def fingerprints(pg: PgTarget) -> Iterator[Fingerprints]:
    """Schema fingerprints through one connection for the whole test."""
    reader = Fingerprints(pg)
    yield reader
    reader.close()


@pytest.mark.parametrize(("name", "template", "enqueues"), CASES, ids=[c[0] for c in CASES])
@settings(
    max_examples=10,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=TEXT)
def test_random_text_never_tracebacks_and_never_half_writes(
    cli: Cli,
    db: Db,
    fingerprints: Fingerprints,
    name: str,
    template: list[str],
    enqueues: bool,
    text: str,
) -> None:
    if fingerprints.read()["jobs"] == 0:
        db.register_actor("work")
        db.failed_job()
    pending = db.jobs(status="pending")
    job = pending[0] if pending else db.enqueue()
    argv = [part.replace("{job}", str(job.id)).replace("{text}", text) for part in template]
    before = fingerprints.read()
    result = cli(*argv)
    after = fingerprints.read()
    assert result.exit_code in (0, 1), (argv, result)
    # A Python traceback's header: the seeded failed job's own stored traceback ("Traceback:
    # boom") is shown by `jobs show` when the random text is a prefix of its id.
    assert "Traceback (most recent call last)" not in result.stderr + result.stdout, (
        argv,
        result.stderr,
    )
    if result.exit_code == 1:
        assert result.stderr.startswith("error: "), (argv, result.stderr)
        assert result.stderr.count("\n") == 1, (argv, result.stderr)
        assert after == before, (argv, result.stderr)
        return
    if "--help" in argv:
        return
    if enqueues:
        assert after["jobs"] == before["jobs"] + 1, argv
    if name == "cancel --reason":
        assert db.get(job.id).cancel_reason == text
