"""JobsClient.enqueue through database trouble, on both backends: bounded retries that never
make a job twice, never inside the caller's transaction, never for a non-transient error.

The trouble is injected in front of the real backend (a lost answer after the insert
committed, a refused connection, a lost race); the real PostgreSQL restart is in
``tests/e2e/test_enqueue_outage.py``.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from taskq_core.backend.protocol import Backend, EnqueueArgs, JobFilter, JobRow
from taskq_core.client import JobsClient
from taskq_core.errors import (
    ConfigError,
    DatabaseUnavailableError,
    SchemaNotMigratedError,
    TaskqError,
    TransientDatabaseError,
)
from tests.conformance.conftest import Harness


class Flaky:
    """The harness's backend, with a script of failures for ``enqueue`` and the reads before.

    ``lose_answers``: enqueues that commit and then fail as a dropped connection would.
    ``refuse``: enqueues that fail before reaching the database, with ``error``.
    ``refuse_reads``: actor_config reads (a by-name enqueue's queue) that fail likewise.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        lose_answers: int = 0,
        refuse: int = 0,
        refuse_reads: int = 0,
        error: TaskqError | None = None,
    ) -> None:
        self._backend = backend
        self.lose_answers = lose_answers
        self.refuse = refuse
        self.refuse_reads = refuse_reads
        self.error = error or DatabaseUnavailableError("PostgreSQL is unavailable (test)")
        self.enqueued: list[EnqueueArgs] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def enqueue(self, args: EnqueueArgs, *, connection: Any = None) -> JobRow:
        self.enqueued.append(args)
        if self.refuse:
            self.refuse -= 1
            raise self.error
        row = await self._backend.enqueue(args, connection=connection)
        if self.lose_answers:
            self.lose_answers -= 1
            raise DatabaseUnavailableError("PostgreSQL is unavailable (connection lost)")
        return row

    async def get_actor_config(self, actor: str) -> Any:
        if self.refuse_reads:
            self.refuse_reads -= 1
            raise self.error
        return await self._backend.get_actor_config(actor)


def client(flaky: Flaky, **options: Any) -> JobsClient:
    return JobsClient(backend=cast(Backend, flaky), **options)


async def jobs(harness: Harness) -> list[JobRow]:
    return await harness.backend.list_jobs(JobFilter(limit=None))


async def test_a_lost_answer_after_the_commit_is_retried_into_the_same_job(
    harness: Harness,
) -> None:
    flaky = Flaky(harness.backend, lose_answers=2)
    async with client(flaky) as jobs_client:
        job = await jobs_client.enqueue("work", {"n": 1})
    assert await jobs(harness) == [job]
    assert len(flaky.enqueued) == 3
    assert {args.job_id for args in flaky.enqueued} == {job.id}


@pytest.mark.parametrize(
    "error",
    [
        DatabaseUnavailableError("PostgreSQL is unavailable (connection refused)"),
        TransientDatabaseError("PostgreSQL asked for a retry (deadlock detected)"),
    ],
    ids=["unavailable", "retry_asked"],
)
async def test_transient_errors_are_retried_until_the_database_answers(
    harness: Harness, error: TaskqError
) -> None:
    flaky = Flaky(harness.backend, refuse=3, refuse_reads=2, error=error)
    async with client(flaky) as jobs_client:
        job = await jobs_client.enqueue("work", {"n": 1})
    assert [(row.id, row.actor, row.payload) for row in await jobs(harness)] == [
        (job.id, "work", {"n": 1})
    ]
    assert len(flaky.enqueued) == 4


async def test_retries_end_with_the_last_error_once_the_time_budget_is_spent(
    harness: Harness,
) -> None:
    flaky = Flaky(harness.backend, refuse=10**6)
    async with client(flaky, enqueue_retry_timeout=0.3) as jobs_client:
        with pytest.raises(DatabaseUnavailableError, match="unavailable"):
            await jobs_client.enqueue("work", {"n": 1})
    assert len(flaky.enqueued) > 1
    assert await jobs(harness) == []


async def test_a_zero_retry_timeout_makes_one_attempt(harness: Harness) -> None:
    flaky = Flaky(harness.backend, refuse=1)
    async with client(flaky, enqueue_retry_timeout=0) as jobs_client:
        with pytest.raises(DatabaseUnavailableError):
            await jobs_client.enqueue("work", {"n": 1})
    assert len(flaky.enqueued) == 1


async def test_an_enqueue_in_the_callers_transaction_is_never_retried(harness: Harness) -> None:
    flaky = Flaky(harness.backend, refuse=1)
    async with client(flaky) as jobs_client:
        with pytest.raises(DatabaseUnavailableError):
            async with harness.backend.transaction() as tx:
                await jobs_client.enqueue("work", {"n": 1}, connection=tx)
    assert len(flaky.enqueued) == 1
    assert await jobs(harness) == []


async def test_an_error_that_is_not_transient_is_not_retried(harness: Harness) -> None:
    flaky = Flaky(harness.backend, refuse=1, error=SchemaNotMigratedError("not migrated"))
    async with client(flaky) as jobs_client:
        with pytest.raises(SchemaNotMigratedError):
            await jobs_client.enqueue("work", {"n": 1})
    assert len(flaky.enqueued) == 1


def test_a_negative_retry_timeout_is_refused(harness: Harness) -> None:
    with pytest.raises(ConfigError, match="enqueue_retry_timeout"):
        JobsClient(backend=harness.backend, enqueue_retry_timeout=-1)
