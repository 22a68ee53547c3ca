"""Finding a job by a piece of its id: any prefix or suffix of its hex digits, hyphens or not,
live or archived, bounded by the caller's limit."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest

from taskq_core.backend.protocol.retention import PrunePolicy
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness
from tests.conformance.states import args, job_in, new_queue

# Ids chosen so that prefixes and suffixes overlap in known ways.
FIRST = UUID("0196a3b2-7c4d-7e00-8000-00000000a1a1")
SECOND = UUID("0196a3b2-7c4d-7e00-8000-00000000b2b2")
OTHER = UUID("ffff0000-0000-7000-8000-0000000c0ffe")


async def enqueue_known_ids(harness: Harness) -> None:
    queue = new_queue()
    for ident in (FIRST, SECOND, OTHER):
        await harness.backend.enqueue(args(queue=queue, job_id=ident))


async def test_a_prefix_finds_every_job_it_starts(harness: Harness) -> None:
    await enqueue_known_ids(harness)
    backend = harness.backend
    assert await backend.list_job_ids_matching("0196a3b2", 10) == [FIRST, SECOND]
    assert await backend.list_job_ids_matching("0196A3B2-7C4D-7E00-8000-00000000B2", 10) == [SECOND]
    assert await backend.list_job_ids_matching("ffff", 10) == [OTHER]
    assert await backend.list_job_ids_matching(str(FIRST), 10) == [FIRST]


async def test_a_suffix_finds_the_jobs_it_ends(harness: Harness) -> None:
    await enqueue_known_ids(harness)
    backend = harness.backend
    assert await backend.list_job_ids_matching("00000000b2b2", 10) == [SECOND]
    assert await backend.list_job_ids_matching("c0ffe", 10) == [OTHER]
    # "a1" ends FIRST; "0196" starts two jobs: both directions count.
    assert await backend.list_job_ids_matching("a1", 10) == [FIRST]


async def test_no_match_is_an_empty_list(harness: Harness) -> None:
    await enqueue_known_ids(harness)
    assert await harness.backend.list_job_ids_matching("123456", 10) == []


async def test_the_limit_bounds_the_answer(harness: Harness) -> None:
    await enqueue_known_ids(harness)
    assert await harness.backend.list_job_ids_matching("0196", 1) == [FIRST]
    assert await harness.backend.list_job_ids_matching("0196", 0) == []


@pytest.mark.parametrize("fragment", ["", "xyz", "0196-zz", "0" * 33, "  "])
async def test_what_is_not_hex_is_refused(harness: Harness, fragment: str) -> None:
    with pytest.raises(ValueError, match="not part of a job id"):
        await harness.backend.list_job_ids_matching(fragment, 10)


async def test_an_archived_job_is_found_too(harness: Harness) -> None:
    job, _ = await job_in(harness, JobStatus.SUCCEEDED)
    await harness.travel(100)
    keep = {JobStatus.SUCCEEDED: timedelta(seconds=10)}
    result = await harness.backend.prune_jobs(
        PrunePolicy(retention=keep, archive_for=timedelta(days=1), queue=job.queue)
    )
    assert result.total == 1
    assert await harness.backend.get(job.id) is None
    assert await harness.backend.list_job_ids_matching(job.id.hex[:12], 10) == [job.id]
    assert await harness.backend.list_job_ids_matching(job.id.hex[-12:], 10) == [job.id]
