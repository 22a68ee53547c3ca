"""Forward-only, checksummed migrations, serialized by an advisory lock per schema.

Files are ``migrations/NNNN_verb_noun.sql`` with a ``{schema}`` placeholder. Each pending file
runs in its own transaction unless its header says ``-- taskq:no-transaction``. The ledger
stores the SHA-256 of the rendered SQL; an applied file whose checksum changed is reported as
drift (warned, never re-run).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path

import asyncpg
import structlog

from taskq_core.constants import migrate_lock_key, validate_identifier
from taskq_core.errors import MigrationError

from .queries import SchemaQueries

NO_TRANSACTION_DIRECTIVE = "-- taskq:no-transaction"
# A file's transaction that lost a deadlock applied nothing, so it runs again, up to this many
# times in all. A live fleet takes its locks in its own order: a file that takes a weak lock
# on a table before a strong one (0022: CREATE INDEX, then DROP INDEX on jobs) deadlocks with
# a worker's transaction that read the table and then writes it, and PostgreSQL ends one of
# the two. The worker's ends first as often as not; when the migration's does, it waits
# RETRY_PAUSE * attempt and tries again rather than failing the deploy.
MIGRATION_ATTEMPTS = 5
RETRY_PAUSE = 0.2
_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# structlog directly (what obs.logs.get_logger returns): backends do not import obs.
_log = structlog.get_logger(component="migrate")


@dataclass(frozen=True)
class Migration:
    """One migration file."""

    version: str
    name: str
    sql: str

    @property
    def no_transaction(self) -> bool:
        """Whether the header opts out of the per-file transaction (for CONCURRENTLY forms)."""
        head = self.sql.lstrip().splitlines()[:5]
        return any(line.strip() == NO_TRANSACTION_DIRECTIVE for line in head)

    def render(self, schema: str) -> str:
        """The SQL with ``{schema}`` replaced by the validated identifier."""
        return self.sql.replace("{schema}", validate_identifier(schema))

    def checksum(self, schema: str) -> str:
        """SHA-256 of the rendered SQL, as stored in the ledger."""
        return hashlib.sha256(self.render(schema).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class MigrationState:
    """A migration as `migrate status` reports it."""

    version: str
    name: str
    status: str  # applied | pending | drift
    applied_at: datetime | None


@dataclass(frozen=True)
class MigrateResult:
    """What `migrate up` did."""

    applied: list[str]
    drift: list[str]


def default_directory() -> Path:
    """The migrations shipped in this package (``backend/postgres/migrations/``)."""
    return Path(str(resources.files("taskq_core.backend.postgres") / "migrations"))


def load_migrations(directory: Path | None = None) -> list[Migration]:
    """Every ``NNNN_name.sql`` file in order; a misnamed .sql file is an error."""
    folder = directory or default_directory()
    if not folder.is_dir():
        raise MigrationError(f"migrations directory not found: {folder}")
    found: list[Migration] = []
    for path in sorted(folder.glob("*.sql")):
        match = _FILE_RE.match(path.name)
        if not match:
            raise MigrationError(f"migration file {path.name!r} is not named NNNN_name.sql")
        found.append(Migration(match.group(1), match.group(2), path.read_text(encoding="utf-8")))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError("two migration files share a version number")
    return found


async def _applied(conn: asyncpg.Connection, queries: SchemaQueries) -> dict[str, asyncpg.Record]:
    if not await conn.fetchval(queries["migrate_ledger_exists"]):
        return {}
    return {row["version"]: row for row in await conn.fetch(queries["migrate_list_applied"])}


def _drifted(
    migrations: list[Migration], applied: dict[str, asyncpg.Record], schema: str
) -> list[str]:
    return [
        f"{m.version}_{m.name}"
        for m in migrations
        if m.version in applied and applied[m.version]["checksum"] != m.checksum(schema)
    ]


async def migrate_up(
    conn: asyncpg.Connection, schema: str, directory: Path | None = None
) -> MigrateResult:
    """Apply every pending migration to ``schema``; concurrent callers apply each file once."""
    queries = SchemaQueries(schema)
    migrations = load_migrations(directory)
    lock_key = migrate_lock_key(schema)
    await conn.execute(queries["migrate_lock"], lock_key)
    try:
        await conn.execute(queries["migrate_create_schema"])
        await conn.execute(queries["migrate_create_ledger"])
        applied = await _applied(conn, queries)
        drift = _drifted(migrations, applied, schema)
        for name in drift:
            _log.warning("migration_checksum_drift", schema=schema, migration=name)
        done: list[str] = []
        for migration in migrations:
            if migration.version in applied:
                continue
            await _apply_one(conn, queries, migration, schema)
            done.append(f"{migration.version}_{migration.name}")
            _log.info("migration_applied", schema=schema, migration=done[-1])
        return MigrateResult(applied=done, drift=drift)
    finally:
        await conn.execute(queries["migrate_unlock"], lock_key)


async def _apply_one(
    conn: asyncpg.Connection, queries: SchemaQueries, migration: Migration, schema: str
) -> None:
    label = f"{migration.version}_{migration.name}"
    sql = migration.render(schema)
    record = (queries["migrate_record"], migration.version, migration.name)
    checksum = migration.checksum(schema)
    try:
        if migration.no_transaction:
            # CONCURRENTLY forms refuse multi-statement strings: run statement by statement.
            # Never retried: a statement that failed may follow ones that took effect.
            for statement in _split_statements(sql):
                await conn.execute(statement)
            await conn.execute(*record, checksum)
            return
        for attempt in range(1, MIGRATION_ATTEMPTS + 1):
            try:
                return await _run_in_transaction(conn, sql, (*record, checksum))
            except asyncpg.exceptions.DeadlockDetectedError:
                if attempt == MIGRATION_ATTEMPTS:
                    raise
            _log.warning(
                "migration_retried", schema=schema, migration=label, attempt=attempt,
                note="it lost a deadlock with a running transaction and applied nothing",
            )  # fmt: skip
            await asyncio.sleep(RETRY_PAUSE * attempt)
    except asyncpg.PostgresError as exc:
        raise MigrationError(f"migration {label} failed: {exc}") from exc


async def _run_in_transaction(conn: asyncpg.Connection, sql: str, record: tuple[str, ...]) -> None:
    """The file and its ledger row, in one transaction."""
    async with conn.transaction():
        await conn.execute(sql)
        await conn.execute(*record)


def _split_statements(sql: str) -> list[str]:
    """Split on semicolons that end a line; no-transaction files keep one statement per line end."""
    statements = [part.strip() for part in re.split(r";\s*$", sql, flags=re.MULTILINE)]
    return [
        s
        for s in statements
        if s
        and not all(line.strip().startswith("--") or not line.strip() for line in s.splitlines())
    ]


async def migration_status(
    conn: asyncpg.Connection, schema: str, directory: Path | None = None
) -> list[MigrationState]:
    """Each known migration as applied, pending or drift (applied, but the file changed)."""
    queries = SchemaQueries(schema)
    migrations = load_migrations(directory)
    applied = await _applied(conn, queries)
    drift = set(_drifted(migrations, applied, schema))
    states = []
    for m in migrations:
        label = f"{m.version}_{m.name}"
        row = applied.get(m.version)
        status = "pending" if row is None else ("drift" if label in drift else "applied")
        states.append(MigrationState(m.version, m.name, status, row["applied_at"] if row else None))
    return states
