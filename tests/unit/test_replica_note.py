"""How a reader says how stale the replica it read is (taskq_cli/replica.py); the real
standby's answers: tests/e2e/test_replica_reads.py."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from taskq_cli.replica import UNKNOWN, StalenessWatch, brief_staleness, describe_staleness
from taskq_core.backend.protocol import Backend, ReadStaleness
from taskq_core.errors import DatabaseUnavailableError


class Standby:
    """A backend whose staleness read answers ``answer`` or raises it; reads counted."""

    def __init__(self, answer: ReadStaleness | Exception | None) -> None:
        self.answer = answer
        self.reads = 0

    async def get_read_staleness(self) -> ReadStaleness | None:
        self.reads += 1
        await asyncio.sleep(0)  # concurrent callers meet here
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def watch(answer: Any) -> tuple[StalenessWatch, Standby]:
    standby = Standby(answer)
    return StalenessWatch(cast(Backend, standby), "standby:5432/jobs", max_age=60.0), standby


def test_each_state_of_a_standby_reads_as_one_line() -> None:
    assert brief_staleness(ReadStaleness(0.012, True, None)) == "12ms behind the primary"
    assert brief_staleness(ReadStaleness(None, True, None)) == "nothing replayed yet"
    lost = ReadStaleness(None, False, datetime.now(UTC) - timedelta(minutes=5))
    assert brief_staleness(lost).startswith("not streaming from its primary (last change 5m")
    assert describe_staleness(None, "db:5432/x").endswith("which is a primary: not behind")


async def test_a_failed_staleness_read_says_unknown_and_does_not_raise() -> None:
    staleness, standby = watch(DatabaseUnavailableError("replay conflict"))
    assert await staleness.refresh() == UNKNOWN
    assert staleness.note == f"read from the replica at standby:5432/jobs, {UNKNOWN}"
    standby.answer = ReadStaleness(0.0, True, None)
    assert await staleness.refresh() == UNKNOWN  # read again only after max_age
    assert standby.reads == 1


async def test_concurrent_readers_share_one_read_of_the_standby() -> None:
    staleness, standby = watch(ReadStaleness(0.25, True, None))
    answers = await asyncio.gather(*(staleness.refresh() for _ in range(5)))
    assert answers == ["250ms behind the primary"] * 5
    assert standby.reads == 1
