"""What the runner reads from the database: the facts the invariants are checked against.

The runner is an outside observer, so it reads the tables directly rather than through the
worker's own code paths. Every read tolerates the database being away (it returns None and
reconnects on the next call): scenarios poll through restarts and outages.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg

from chaos.actors import EFFECTS_TABLE
from taskq_core.backend.postgres.migrate import migrate_up
from taskq_core.constants import validate_identifier

TERMINAL = ("succeeded", "failed", "cancelled", "crashed", "abandoned")
UNREACHABLE = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncio.TimeoutError)


async def prepare_schema(dsn: str, schema: str) -> None:
    """Migrate ``schema`` and create the transactional actor's side table in it."""
    conn = await asyncpg.connect(dsn)
    try:
        await migrate_up(conn, schema)
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {validate_identifier(schema)}.{EFFECTS_TABLE} "
            "(job_id uuid NOT NULL, attempt int NOT NULL, pid int NOT NULL)"
        )
    finally:
        await conn.close()


@dataclass(frozen=True, slots=True)
class FailureCause:
    """How many jobs of one actor ended with one status and one error."""

    actor: str
    status: str
    error_class: str | None
    message: str | None
    count: int

    def describe(self) -> str:
        cause = f"{self.error_class or '-'}: {self.message or '-'}"
        return f"{self.count} {self.actor} {self.status} ({cause})"


@dataclass(frozen=True, slots=True)
class AttemptInfo:
    """One ``job_attempts`` row: which body of which job, and how it ended."""

    job_id: UUID
    attempt: int
    outcome: str


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    id: UUID
    pid: int
    label: str | None
    status: str


class Probe:
    """One reconnecting connection to a scenario's schema."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.s = validate_identifier(schema)
        self._conn: asyncpg.Connection | None = None

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                await asyncio.wait_for(conn.close(), 2)
            except UNREACHABLE:
                conn.terminate()

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record] | None:
        """Rows of ``query`` ({s} is the schema), or None while the database is unreachable."""
        try:
            if self._conn is None or self._conn.is_closed():
                self._conn = await asyncpg.connect(self.dsn, timeout=2, command_timeout=10)
            return list(await self._conn.fetch(query.format(s=self.s), *args))
        except UNREACHABLE:
            if self._conn is not None:
                self._conn.terminate()
                self._conn = None
            return None

    async def status_counts(self) -> dict[str, int] | None:
        rows = await self.fetch("SELECT status::text AS s, count(*) AS n FROM {s}.jobs GROUP BY 1")
        return None if rows is None else {r["s"]: r["n"] for r in rows}

    async def unfinished(self) -> int | None:
        counts = await self.status_counts()
        if counts is None:
            return None
        return sum(n for status, n in counts.items() if status not in TERMINAL)

    async def pending(self, queue: str) -> int | None:
        """How many jobs wait in ``queue``."""
        rows = await self.fetch(
            "SELECT count(*) AS n FROM {s}.jobs WHERE queue = $1 AND status = 'pending'", queue
        )
        return None if rows is None else int(rows[0]["n"])

    async def running_in(self, queue: str) -> int | None:
        """How many jobs of ``queue`` are claimed or running."""
        rows = await self.fetch(
            "SELECT count(*) AS n FROM {s}.jobs WHERE queue = $1 AND status = 'running'", queue
        )
        return None if rows is None else int(rows[0]["n"])

    async def statuses(self, ids: list[UUID]) -> dict[UUID, str] | None:
        rows = await self.fetch(
            "SELECT id, status::text AS s FROM {s}.jobs WHERE id = ANY($1::uuid[])", ids
        )
        return None if rows is None else {r["id"]: r["s"] for r in rows}

    async def running_owners(self) -> list[tuple[UUID, UUID | None]] | None:
        rows = await self.fetch(
            "SELECT id, locked_by_worker FROM {s}.jobs WHERE status = 'running' ORDER BY id"
        )
        return None if rows is None else [(r["id"], r["locked_by_worker"]) for r in rows]

    async def workers(self) -> list[WorkerInfo] | None:
        rows = await self.fetch("SELECT id, pid, worker_label, status FROM {s}.workers")
        if rows is None:
            return None
        return [WorkerInfo(r["id"], r["pid"], r["worker_label"], r["status"]) for r in rows]

    async def crashed_attempts(self) -> list[tuple[UUID, int]] | None:
        rows = await self.fetch(
            "SELECT job_id, attempt FROM {s}.job_attempts WHERE outcome = 'crashed'"
        )
        return None if rows is None else [(r["job_id"], r["attempt"]) for r in rows]

    async def starts_before_body(self) -> dict[UUID, int] | None:
        """Per job, its reclaims whose start was written before the body was called."""
        rows = await self.fetch(
            "SELECT job_id, count(*) AS n FROM {s}.job_events WHERE kind = 'reclaim' "
            "AND detail ->> 'start_before_body' = 'true' GROUP BY job_id"
        )
        return None if rows is None else {r["job_id"]: r["n"] for r in rows}

    async def finish_times(self, status: str | None = None) -> list[float] | None:
        """Epoch seconds of every terminal job's finish (of ``status`` only, when given)."""
        rows = await self.fetch(
            "SELECT extract(epoch FROM finished_at)::float8 AS t FROM {s}.jobs "
            "WHERE finished_at IS NOT NULL AND status::text = ANY($1::text[]) ORDER BY 1",
            [status] if status else list(TERMINAL),
        )
        return None if rows is None else [r["t"] for r in rows]

    async def finished_at(self, ids: list[UUID]) -> dict[UUID, float] | None:
        """Epoch seconds each of ``ids`` finished at (terminal ones only)."""
        rows = await self.fetch(
            "SELECT id, extract(epoch FROM finished_at)::float8 AS t FROM {s}.jobs "
            "WHERE id = ANY($1::uuid[]) AND finished_at IS NOT NULL",
            ids,
        )
        return None if rows is None else {r["id"]: r["t"] for r in rows}

    async def ended_at(self) -> dict[UUID, float] | None:
        """When each job ended, epoch seconds: its finish, or its first stored succeeded
        attempt's if earlier (a job that succeeded has ended, whatever its row says later;
        a success since stores no attempt row, and its row's finish is its end)."""
        rows = await self.fetch(
            "SELECT j.id, extract(epoch FROM least(j.finished_at, s.first))::float8 AS t "
            "FROM {s}.jobs j LEFT JOIN LATERAL (SELECT min(a.finished_at) AS first "
            "FROM {s}.job_attempts a WHERE a.job_id = j.id AND a.outcome = 'succeeded') s "
            "ON true WHERE j.finished_at IS NOT NULL OR s.first IS NOT NULL"
        )
        return None if rows is None else {r["id"]: r["t"] for r in rows}

    async def reclaims(self, ids: list[UUID]) -> list[tuple[UUID, float]] | None:
        """(job, epoch seconds) of every reclaim event of ``ids``."""
        rows = await self.fetch(
            "SELECT job_id, extract(epoch FROM occurred_at)::float8 AS t FROM {s}.job_events "
            "WHERE kind = 'reclaim' AND job_id = ANY($1::uuid[]) ORDER BY 2",
            ids,
        )
        return None if rows is None else [(r["job_id"], r["t"]) for r in rows]

    async def effects(self) -> dict[UUID, int] | None:
        rows = await self.fetch(
            f"SELECT job_id, count(*) AS n FROM {{s}}.{EFFECTS_TABLE} GROUP BY job_id"
        )
        return None if rows is None else {r["job_id"]: r["n"] for r in rows}

    async def succeeded_ids(self, actor: str) -> set[UUID] | None:
        rows = await self.fetch(
            "SELECT id FROM {s}.jobs WHERE status = 'succeeded' AND actor = $1", actor
        )
        return None if rows is None else {r["id"] for r in rows}

    async def failure_causes(self) -> list[FailureCause] | None:
        """Jobs that ended other than succeeded, counted per actor, status and cause."""
        rows = await self.fetch(
            "SELECT actor, status::text AS status, error_class, left(error_message, 240) AS msg, "
            "count(*) AS n FROM {s}.jobs "
            "WHERE status::text IN ('failed', 'cancelled', 'crashed', 'abandoned') "
            "GROUP BY 1, 2, 3, 4 ORDER BY 5 DESC, 1, 2"
        )
        if rows is None:
            return None
        return [
            FailureCause(r["actor"], r["status"], r["error_class"], r["msg"], r["n"]) for r in rows
        ]

    async def attempts(self, ids: list[UUID] | None = None) -> list[AttemptInfo] | None:
        """The attempt history of ``ids``, or of every job, in order: the ``job_attempts``
        rows, then a success's attempt, which is kept on the job row (``get_attempts``)."""
        rows = await self.fetch(
            "SELECT job_id, attempt, outcome FROM ("
            " SELECT job_id, attempt, outcome, id, false AS from_row FROM {s}.job_attempts"
            " WHERE $1::uuid[] IS NULL OR job_id = ANY($1::uuid[])"
            " UNION ALL"
            " SELECT j.id, j.attempt, 'succeeded', 0, true FROM {s}.jobs j"
            " WHERE j.status = 'succeeded' AND ($1::uuid[] IS NULL OR j.id = ANY($1::uuid[]))"
            "   AND NOT EXISTS (SELECT 1 FROM {s}.job_attempts a"
            "                   WHERE a.job_id = j.id AND a.outcome = 'succeeded')"
            ") x ORDER BY job_id, from_row, id",
            ids,
        )
        if rows is None:
            return None
        return [AttemptInfo(r["job_id"], r["attempt"], r["outcome"]) for r in rows]

    async def dump(self, directory: Path) -> list[str]:
        """Copy the tables an investigation reads (jobs, attempts, events, workers) to CSV
        files in ``directory`` (the schema goes with the private server); the files written."""
        written: list[str] = []
        for table in ("jobs", "job_attempts", "job_events", "workers"):
            path = directory / f"{table}.csv"
            try:
                if self._conn is None or self._conn.is_closed():
                    self._conn = await asyncpg.connect(self.dsn, timeout=2, command_timeout=60)
                await self._conn.copy_from_query(
                    f"SELECT * FROM {self.s}.{table}", output=path, format="csv", header=True
                )
            except UNREACHABLE:
                continue
            written.append(path.name)
        return written

    async def leader(self) -> UUID | None:
        rows = await self.fetch(
            "SELECT worker_id FROM {s}.maintenance_leader WHERE name = 'maintenance'"
        )
        return rows[0]["worker_id"] if rows else None
