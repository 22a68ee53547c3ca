"""A worker's end as its supervisor saw it, and an operator's acknowledgement of its silence."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from taskq_core.backend.protocol import WorkerRow
from taskq_core.backend.protocol.admin import Audit
from taskq_core.liveness import raises_stale_alert, silence_acknowledged
from tests.conformance.conftest import Harness
from tests.conformance.states import between
from tests.conformance.test_workers_leader import info

STALE_AFTER = timedelta(seconds=40)
ALICE = Audit(by="alice@ops-1", reason="host is gone")


async def only_row(harness: Harness) -> WorkerRow:
    [row] = await harness.backend.list_workers()
    return row


async def test_a_running_worker_marked_exited_is_stopped_with_its_signal(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    before = await harness.now()
    assert await backend.mark_worker_exited(worker, None, "SIGKILL")
    after = await harness.now()
    row = await only_row(harness)
    assert (row.status, row.exit_code, row.exit_signal) == ("stopped", None, "SIGKILL")
    assert row.stopped_at is not None and between(row.stopped_at, before, after)
    assert not raises_stale_alert(row, after + timedelta(hours=1), STALE_AFTER)


async def test_an_exit_after_a_clean_stop_keeps_the_workers_own_stop_time(
    harness: Harness,
) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    await backend.mark_worker_stopped(worker)
    stopped_at = (await only_row(harness)).stopped_at
    assert stopped_at is not None
    await harness.travel(1)  # Postgres: moves the stored times back; memory: the clock on
    assert await backend.mark_worker_exited(worker, 0, None)
    row = await only_row(harness)
    assert (row.status, row.exit_code, row.exit_signal) == ("stopped", 0, None)
    moved = timedelta(0) if harness.clock is not None else timedelta(seconds=1)
    assert row.stopped_at == stopped_at - moved


async def test_an_unknown_worker_cannot_be_marked_exited(harness: Harness) -> None:
    assert not await harness.backend.mark_worker_exited(uuid4(), 1, None)
    assert await harness.backend.list_workers() == []


async def test_a_stale_workers_silence_is_acknowledged_with_who_and_why(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    await harness.travel(60)
    row = await only_row(harness)
    now = await harness.now()
    assert raises_stale_alert(row, now, STALE_AFTER)
    assert row.acknowledged_at is None and row.acknowledged_by is None

    before = await harness.now()
    assert await backend.mark_worker_acknowledged(worker, row.last_seen_at, ALICE)
    after = await harness.now()
    acked = await only_row(harness)
    assert acked.acknowledged_by == "alice@ops-1" and acked.status == "running"
    assert acked.acknowledged_at is not None and between(acked.acknowledged_at, before, after)
    assert silence_acknowledged(acked)
    assert not raises_stale_alert(acked, after, STALE_AFTER)
    [entry] = await backend.list_operator_log(action="worker_ack")
    assert (entry.target, entry.by, entry.reason) == (str(worker), "alice@ops-1", "host is gone")
    assert entry.detail == {"last_seen_at": row.last_seen_at.isoformat()}
    assert entry.occurred_at == acked.acknowledged_at


async def test_an_acknowledgement_lapses_when_the_worker_is_heard_from_again(
    harness: Harness,
) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    await harness.travel(60)
    row = await only_row(harness)
    assert await backend.mark_worker_acknowledged(worker, row.last_seen_at, ALICE)
    await harness.travel(1)
    await backend.heartbeat(worker, timedelta(seconds=30))
    beat = await only_row(harness)
    assert not silence_acknowledged(beat)
    await harness.travel(60)  # silent again: a new silence, a new alert
    assert raises_stale_alert(await only_row(harness), await harness.now(), STALE_AFTER)


async def test_an_acknowledgement_is_fenced_by_the_last_seen_time_it_judged(
    harness: Harness,
) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    await harness.travel(60)
    judged = (await only_row(harness)).last_seen_at
    await harness.travel(1)
    await backend.heartbeat(worker, timedelta(seconds=30))  # heard from since the judgement
    assert not await backend.mark_worker_acknowledged(worker, judged, ALICE)
    assert (await only_row(harness)).acknowledged_at is None
    assert await backend.list_operator_log(action="worker_ack") == []


async def test_a_stopped_or_unknown_worker_is_not_acknowledged(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    row = await only_row(harness)
    await backend.mark_worker_exited(worker, None, "SIGKILL")
    assert not await backend.mark_worker_acknowledged(worker, row.last_seen_at, ALICE)
    assert not await backend.mark_worker_acknowledged(uuid4(), row.last_seen_at, ALICE)
    assert await backend.list_operator_log(action="worker_ack") == []


async def test_the_stale_worker_cleanup_takes_the_row_and_its_alert(harness: Harness) -> None:
    backend = harness.backend
    worker = uuid4()
    await backend.register_worker(info(worker))
    await harness.travel(3600)
    row = await only_row(harness)
    assert raises_stale_alert(row, await harness.now(), STALE_AFTER)
    assert await backend.delete_stale_workers(timedelta(minutes=30)) == 1
    assert await backend.list_workers() == []
