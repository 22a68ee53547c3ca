"""Each reaped child's end goes into the workers row of the id it was started under."""

from __future__ import annotations

import signal
from uuid import UUID

from taskq_core.errors import DatabaseUnavailableError
from taskq_core.supervisor.exit_records import EXIT_WRITE_RETRY, MAX_PENDING, ExitRecords
from tests.unit.test_supervisor_manager import Harness, make_plan


def worker_id(harness: Harness, label: str) -> UUID:
    """The id the latest process of ``label`` was told to register under."""
    return UUID(harness.child(label).launch.env["TASKQ_WORKER_ID"])


async def test_every_process_gets_a_worker_id_of_its_own() -> None:
    harness = Harness(make_plan({"api": 2}))
    await harness.step()
    first = worker_id(harness, "api-1")
    assert first != worker_id(harness, "api-2")
    harness.child("api-1").signal(signal.SIGKILL)
    await harness.step()
    await harness.step(5.0)  # past the backoff: a new process, a new id
    assert len(harness.children) == 3
    assert worker_id(harness, "api-1") not in (first, worker_id(harness, "api-2"))


async def test_a_killed_child_is_written_stopped_with_its_signal_in_the_pass_that_reaps_it() -> (
    None
):
    harness = Harness(make_plan({"api": 1}))
    await harness.step()
    killed = worker_id(harness, "api-1")
    harness.child("api-1").signal(signal.SIGKILL)
    await harness.step()
    assert harness.recorded == [(killed, None, "SIGKILL")]
    [exited] = harness.of("child_exited")
    assert exited["worker_id"] == str(killed) and exited["signal"] == "SIGKILL"


async def test_a_crash_and_a_clean_exit_are_written_with_their_exit_status() -> None:
    harness = Harness(make_plan({"api": 1, "media": 1}, until_idle=True))
    await harness.step()
    api, media = worker_id(harness, "api-1"), worker_id(harness, "media-1")
    harness.child("api-1").exit(1)
    harness.child("media-1").exit(0)
    await harness.step()
    assert sorted(harness.recorded) == sorted([(api, 1, None), (media, 0, None)])


async def test_children_stopped_with_the_group_are_written_before_it_returns() -> None:
    harness = Harness(make_plan({"api": 2}))
    await harness.step()
    ids = {worker_id(harness, "api-1"), worker_id(harness, "api-2")}
    harness.manager.request_stop("SIGTERM")
    assert await harness.step() == 0
    assert {(w, code) for w, code, _ in harness.recorded} == {(w, 0) for w in ids}


async def test_a_failed_write_is_kept_said_once_and_retried_later() -> None:
    harness = Harness(make_plan({"api": 1}))
    await harness.step()
    killed = worker_id(harness, "api-1")
    harness.record_error = DatabaseUnavailableError("PostgreSQL is unavailable")
    harness.child("api-1").signal(signal.SIGKILL)
    await harness.step()
    await harness.step(0.1)
    [warning] = harness.of("child_exit_unrecorded")  # said once, not at every pass
    assert warning["pending"] == 1 and "unavailable" in warning["error"]
    retry_at = harness.clock.monotonic() - 0.1 + EXIT_WRITE_RETRY
    next_deadline = harness.manager.next_deadline()
    assert next_deadline is not None and next_deadline <= retry_at
    harness.record_error = None
    await harness.step(0.1)  # before the retry is due: nothing written
    assert harness.recorded == []
    await harness.step(EXIT_WRITE_RETRY)
    assert harness.recorded == [(killed, None, "SIGKILL")]
    assert harness.of("child_exits_recorded") == [{"written": 1}]


async def test_the_pending_writes_are_bounded_to_the_latest() -> None:
    harness = Harness(make_plan({"api": 1}))
    records = ExitRecords(harness.record_exit, harness.clock, lambda *a, **k: None)
    ids = [UUID(int=n) for n in range(MAX_PENDING + 5)]
    for n, each in enumerate(ids):
        records.add(f"api-{n}", each, 1)
    records.add("never-registered", None, 1)  # no id: nothing to write
    assert [done.worker_id for done in records.pending] == ids[5:]
    await records.flush()
    assert [w for w, _, _ in harness.recorded] == ids[5:]
