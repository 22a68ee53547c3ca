"""A deterministic dashboard state, written through the Backend protocol alone.

Twenty minutes of traffic on four queues (one backlogged, one paused, one round_robin with a
cap), three workers (a leader, a busy one, one gone silent) plus a stopped one, and failures
with real-looking errors. Ids come from a seeded generator and time from the caller's clock
(FakeClock on memory), so the screen renders the same every time. ``seed_dashboard`` works on
any backend; on Postgres the timestamps are the database's own.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from uuid import UUID

from taskq_core.backend.protocol import (
    Backend,
    EnqueueArgs,
    ErrorInfo,
    JobRow,
    Lease,
    Start,
    WorkerInfo,
)

LEASE = timedelta(minutes=5)
TRACEBACK = """Traceback (most recent call last):
  File "app/media.py", line 42, in resize
    image = await fetch(payload.url)
  File "app/http.py", line 17, in fetch
    raise ConnectionResetError("upstream closed the connection")
ConnectionResetError: upstream closed the connection
"""


@dataclass
class SeededDashboard:
    """What the seed created, for assertions."""

    leader: UUID
    busy: UUID
    silent: UUID
    stopped: UUID
    failed: list[JobRow] = field(default_factory=list)
    pending_email: JobRow | None = None


class _Ids:
    """Deterministic UUIDs (version 4 layout) from a fixed seed."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def __call__(self) -> UUID:
        return UUID(int=self._random.getrandbits(128), version=4)


async def seed_dashboard(
    backend: Backend, advance: Callable[[float], object] | None = None
) -> SeededDashboard:
    """Write the dashboard state. ``advance(seconds)`` moves the backend's clock (memory's
    FakeClock); without it everything happens "now" and only the counts are meaningful."""
    ids = _Ids(8)

    def tick(seconds: float) -> None:
        if advance is not None:
            advance(seconds)

    async def run(actor: str, queue: str, worker: UUID, *, payload: dict[str, object]) -> Lease:
        """Enqueue a job, dispatch it to ``worker`` and start its body: its lease."""
        job = await backend.enqueue(
            EnqueueArgs(actor=actor, queue=queue, payload=payload, priority=100, job_id=ids())
        )
        claimed = await backend.dispatch_batch(worker, [queue], 1, LEASE)
        assert [c.id for c in claimed] == [job.id], "the seed's job must dispatch first"
        assert await backend.mark_started_many(worker, [Start(job.id, claimed[0].attempt)])
        return claimed[0].lease()

    leader, busy, silent, stopped = ids(), ids(), ids(), ids()
    workers = [
        WorkerInfo(
            leader,
            "node-a",
            4101,
            ["media", "webhooks"],
            ["resize", "deliver"],
            8,
            label="media-1",
            workgroup_instance="prod-a",
        ),
        WorkerInfo(
            busy,
            "node-b",
            4202,
            ["emails", "media"],
            ["send_email", "resize"],
            4,
            label="emails-1",
            workgroup_instance="prod-a",
        ),
        WorkerInfo(silent, "node-c", 4303, ["reports"], ["build_report"], 2, label="reports-1"),
        WorkerInfo(stopped, "node-c", 4304, ["reports"], ["build_report"], 2, label="reports-0"),
    ]
    for info in workers:
        await backend.register_worker(info)
    await backend.mark_worker_stopped(stopped)
    assert await backend.try_acquire_leadership(leader)
    seeded = SeededDashboard(leader=leader, busy=busy, silent=silent, stopped=stopped)

    await backend.update_queue("webhooks", mode="round_robin", max_concurrent=8)
    # A backlog that has waited a while: the oldest email has been pending for 14 minutes.
    seeded.pending_email = await backend.enqueue(
        EnqueueArgs(
            actor="send_email", queue="emails", payload={"to": "ops@example.com"}, job_id=ids()
        )
    )
    tick(60)

    # Twenty minutes of traffic, heavier lately on media.
    for minute in range(20):
        for n in range(1 + minute % 4 + (minute // 5)):
            job = await run(
                "resize",
                "media",
                leader,
                payload={"url": f"s3://img/{minute}-{n}.png", "width": 640},
            )
            await backend.mark_succeeded(job, {"ok": True})
        for n in range(2 if minute % 3 else 1):
            job = await run("deliver", "webhooks", leader, payload={"hook": n})
            await backend.mark_succeeded(job, {"status": 200})
        if minute % 2 == 0:
            job = await run(
                "send_email", "emails", busy, payload={"to": f"user{minute}@example.com"}
            )
            await backend.mark_succeeded(job, None)
        if minute in (6, 13, 17):
            job = await run(
                "resize",
                "media",
                busy,
                payload={"url": f"s3://img/broken-{minute}.png", "width": 0},
            )
            error = ErrorInfo("ConnectionResetError", "upstream closed the connection", TRACEBACK)
            failed = await backend.mark_failed_or_retry(job, error, None)
            assert failed is not None
            seeded.failed.append(failed)
        if minute == 15:
            job = await run("build_report", "reports", silent, payload={"report": "daily"})
            failed = await backend.mark_failed_or_retry(
                job, ErrorInfo("KeyError", "'region'", "KeyError: 'region'"), None
            )
            assert failed is not None
            seeded.failed.append(failed)
        await backend.heartbeat(leader, LEASE, is_leader=True)
        await backend.heartbeat(busy, LEASE)
        if minute < 18:
            await backend.heartbeat(silent, LEASE)
        tick(60)

    # What is in flight now: media running on both workers, a backlog, scheduled reports.
    in_flight = [
        await run(
            "resize",
            "media",
            leader if n else busy,
            payload={"url": f"s3://img/live-{n}.png", "width": 1280},
        )
        for n in range(3)
    ]
    await backend.enqueue_batch(
        [
            EnqueueArgs(
                actor="resize",
                queue="media",
                payload={"url": f"s3://img/q{n}.png", "width": 320},
                job_id=ids(),
            )
            for n in range(42)
        ]
    )
    await backend.enqueue_batch(
        [
            EnqueueArgs(
                actor="send_email",
                queue="emails",
                payload={"to": f"late{n}@example.com"},
                job_id=ids(),
            )
            for n in range(5)
        ]
    )
    await backend.enqueue_batch(
        [
            EnqueueArgs(
                actor="build_report",
                queue="reports",
                payload={"report": f"r{n}"},
                delay=timedelta(hours=1),
                job_id=ids(),
            )
            for n in range(4)
        ]
    )
    await backend.update_queue(
        "reports", paused=True, paused_by="ops@node-a", pause_reason="month-end freeze"
    )
    tick(20)
    for n in range(4):
        job = await run("deliver", "webhooks", leader, payload={"hook": 100 + n})
        await backend.mark_succeeded(job, {"status": 200})

    def held_by(worker: UUID) -> list[Lease]:
        return [held for held in in_flight if held.worker_id == worker]

    await backend.heartbeat(leader, LEASE, held_by(leader), is_leader=True)
    await backend.heartbeat(busy, LEASE, held_by(busy))
    return seeded
