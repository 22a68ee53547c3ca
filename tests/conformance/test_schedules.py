"""Cron schedules: the operator's writes, the code's upsert at worker start, and the leader's
fire (one job per fire time, one catch-up job after downtime).

Fire times are checked against ``Schedule`` on the times the backend stamped (created_at,
updated_at), so no test depends on when it runs. Time travel (``harness.travel``) moves
every stored timestamp back on Postgres, which is the same as time passing for a cron grid
as long as the step is a whole number of the expression's periods; tests step in whole
periods. The daylight-saving tests need the clock at a chosen date, which only the memory
backend's FakeClock can do: on Postgres they are skipped, and the same fire rules
(``protocol.schedules.due_fire``, shared by both backends) are covered at those dates by
tests/unit/test_schedule_fire.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from taskq_core.backend.protocol import (
    ActorDeclaration,
    EnqueueArgs,
    JobFilter,
    JobRow,
    ScheduleExistsError,
    ScheduleSpec,
    ScheduleUpdate,
    schedule_job_key,
)
from taskq_core.backend.protocol.admin import Audit
from taskq_core.cron_timing import Schedule
from taskq_core.statemachine import JobStatus
from tests.conformance.conftest import Harness

HOURLY = "0 * * * *"
DAILY = "0 3 * * *"  # the daily tests step whole days: a fire time stays one
DAY = 86400


def spec(name: str = "nightly", cron: str = HOURLY, **fields: object) -> ScheduleSpec:
    fields.setdefault("actor", "build_report")
    return ScheduleSpec(name=name, cron=cron, **fields)  # type: ignore[arg-type]


# --- the operator's writes -----------------------------------------------------------------
async def test_a_new_schedule_is_enabled_and_fires_next_after_its_creation(
    harness: Harness,
) -> None:
    backend = harness.backend
    row = await backend.create_schedule(
        spec(cron="0  3 * * *", timezone="Europe/Berlin", payload={"full": True}, queue="rep")
    )
    assert (row.name, row.actor, row.queue, row.payload) == (
        "nightly",
        "build_report",
        "rep",
        {"full": True},
    )
    assert (row.cron, row.timezone, row.enabled) == ("0 3 * * *", "Europe/Berlin", True)
    assert not row.declared_in_code
    assert (row.last_fired_at, row.last_job_id) == (None, None)
    assert row.next_fire_at == Schedule("0 3 * * *", "Europe/Berlin").next_fire(row.created_at)
    assert row.updated_at == row.created_at
    assert await backend.get_schedule("nightly") == row


async def test_a_taken_name_is_refused_and_the_first_schedule_stays(harness: Harness) -> None:
    backend = harness.backend
    first = await backend.create_schedule(spec())
    with pytest.raises(ScheduleExistsError, match="nightly"):
        await backend.create_schedule(spec(actor="other", cron="*/5 * * * *"))
    assert await backend.list_schedules() == [first]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cron": "61 * * * *"}, "cron expression"),
        ({"cron": "* * * *"}, "5-field"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"actor": ""}, "actor"),
        ({"name": " "}, "name"),
        ({"payload": [1]}, "payload"),
    ],
)
async def test_a_bad_schedule_is_refused_by_field(
    harness: Harness, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        await harness.backend.create_schedule(spec(**fields))  # type: ignore[arg-type]
    assert await harness.backend.list_schedules() == []


async def test_list_is_by_name_and_filters_by_actor_and_enabled(harness: Harness) -> None:
    backend = harness.backend
    await backend.create_schedule(spec("b", actor="x"))
    await backend.create_schedule(spec("a", actor="y"))
    await backend.create_schedule(spec("c", actor="x"))
    await backend.update_schedule("c", ScheduleUpdate(enabled=False))
    assert [r.name for r in await backend.list_schedules()] == ["a", "b", "c"]
    assert [r.name for r in await backend.list_schedules(actor="x")] == ["b", "c"]
    assert [r.name for r in await backend.list_schedules(enabled=True)] == ["a", "b"]
    assert [r.name for r in await backend.list_schedules(actor="x", enabled=False)] == ["c"]
    assert await backend.get_schedule("nope") is None


async def test_an_update_of_payload_queue_or_actor_keeps_the_next_fire_time(
    harness: Harness,
) -> None:
    backend = harness.backend
    before = await backend.create_schedule(spec())
    await harness.travel(60)
    after = await backend.update_schedule(
        "nightly", ScheduleUpdate(payload={"v": 2}, queue="q2", actor="other")
    )
    assert after is not None
    assert (after.payload, after.queue, after.actor) == ({"v": 2}, "q2", "other")
    assert after.updated_at > after.created_at
    cleared = await backend.update_schedule("nightly", ScheduleUpdate(queue=None))
    assert cleared is not None and cleared.queue is None
    if harness.kind == "memory":  # Postgres' travel moved the stored time itself back
        assert after.next_fire_at == before.next_fire_at
    assert cleared.next_fire_at == after.next_fire_at


async def test_a_new_expression_or_zone_plans_the_next_fire_from_now(harness: Harness) -> None:
    backend = harness.backend
    await backend.create_schedule(spec())
    row = await backend.update_schedule("nightly", ScheduleUpdate(cron="*/5 * * * *"))
    assert row is not None and row.cron == "*/5 * * * *"
    assert row.next_fire_at == Schedule("*/5 * * * *").next_fire(row.updated_at)
    row = await backend.update_schedule(
        "nightly", ScheduleUpdate(cron="30 2 * * *", timezone="Asia/Tokyo")
    )
    assert row is not None
    assert row.next_fire_at == Schedule("30 2 * * *", "Asia/Tokyo").next_fire(row.updated_at)


async def test_a_bad_update_is_refused_and_writes_nothing(harness: Harness) -> None:
    backend = harness.backend
    before = await backend.create_schedule(spec())
    for update, message in [
        (ScheduleUpdate(cron="every day"), "5-field"),
        (ScheduleUpdate(timezone="Nowhere/Else"), "timezone"),
        (ScheduleUpdate(actor=""), "actor"),
        (ScheduleUpdate(enabled="yes"), "enabled"),
    ]:
        with pytest.raises(ValueError, match=message):
            await backend.update_schedule("nightly", update)
    assert await backend.get_schedule("nightly") == before
    assert await backend.update_schedule("nope", ScheduleUpdate(enabled=False)) is None


async def test_disable_keeps_the_row_and_enable_plans_from_now(harness: Harness) -> None:
    backend = harness.backend
    await backend.create_schedule(spec())
    off = await backend.update_schedule("nightly", ScheduleUpdate(enabled=False))
    assert off is not None and not off.enabled and off.next_fire_at is None
    assert await backend.get_schedule("nightly") == off
    await harness.travel(3 * 3600)
    on = await backend.update_schedule("nightly", ScheduleUpdate(enabled=True))
    assert on is not None and on.enabled
    assert on.next_fire_at == Schedule(HOURLY).next_fire(on.updated_at)


async def test_delete_removes_the_schedule(harness: Harness) -> None:
    backend = harness.backend
    await backend.create_schedule(spec())
    assert await backend.delete_schedule("nightly") is True
    assert await backend.get_schedule("nightly") is None
    assert await backend.delete_schedule("nightly") is False
    await backend.create_schedule(spec())  # the name is free again


async def test_audited_writes_go_to_the_operator_log_with_what_changed(
    harness: Harness,
) -> None:
    backend = harness.backend
    who = Audit(by="ops@host", reason="quarter close")
    await backend.create_schedule(spec(), audit=who)
    await backend.update_schedule("nightly", ScheduleUpdate(enabled=False), audit=who)
    await backend.update_schedule("nightly", ScheduleUpdate(queue="reports"))  # unaudited
    assert await backend.delete_schedule("nightly", audit=Audit(by="ops@host")) is True
    assert await backend.delete_schedule("nightly", audit=who) is False  # nothing to log
    entries = await backend.list_operator_log(target="nightly")
    assert [(e.action, e.by, e.reason) for e in entries] == [
        ("schedule_delete", "ops@host", None),
        ("schedule_update", "ops@host", "quarter close"),
        ("schedule_create", "ops@host", "quarter close"),
    ]
    assert entries[1].detail == {"changed": {"enabled": [True, False]}}
    assert entries[2].detail == {"actor": "build_report", "cron": HOURLY, "timezone": "UTC"}


# --- the code's upsert ---------------------------------------------------------------------
async def test_code_schedules_are_created_then_unchanged(harness: Harness) -> None:
    backend = harness.backend
    declared = [spec("refresh", "*/15 * * * *", payload={"full": False}), spec("nightly")]
    result = await backend.sync_code_schedules(declared)
    assert (result.created, result.updated, result.unchanged, result.orphaned) == (
        ["refresh", "nightly"],
        [],
        [],
        [],
    )
    rows = await backend.list_schedules()
    assert [(r.name, r.declared_in_code, r.enabled) for r in rows] == [
        ("nightly", True, True),
        ("refresh", True, True),
    ]
    assert rows[1].next_fire_at == Schedule("*/15 * * * *").next_fire(rows[1].created_at)
    again = await backend.sync_code_schedules(declared)
    assert (again.created, again.updated, again.unchanged) == ([], [], ["refresh", "nightly"])
    assert await backend.list_schedules() == rows


async def test_the_code_updates_its_fields_and_keeps_the_operators_disable(
    harness: Harness,
) -> None:
    backend = harness.backend
    await backend.sync_code_schedules([spec("refresh", "*/15 * * * *")])
    await backend.update_schedule("refresh", ScheduleUpdate(enabled=False))
    result = await backend.sync_code_schedules(
        [spec("refresh", "*/5 * * * *", payload={"v": 2}, queue="fast", timezone="UTC")]
    )
    assert result.updated == ["refresh"]
    row = await backend.get_schedule("refresh")
    assert row is not None
    assert (row.cron, row.payload, row.queue, row.enabled) == (
        "*/5 * * * *",
        {"v": 2},
        "fast",
        False,
    )
    assert row.next_fire_at is None  # still disabled: no fire planned
    await backend.update_schedule("refresh", ScheduleUpdate(enabled=True))
    result = await backend.sync_code_schedules([spec("refresh", "0 * * * *", queue="fast")])
    assert result.updated == ["refresh"]
    row = await backend.get_schedule("refresh")
    assert row is not None and row.enabled
    assert row.next_fire_at == Schedule(HOURLY).next_fire(row.updated_at)


async def test_schedules_no_longer_declared_are_reported_not_deleted(harness: Harness) -> None:
    backend = harness.backend
    await backend.sync_code_schedules([spec("old"), spec("kept")])
    await backend.create_schedule(spec("manual"))
    result = await backend.sync_code_schedules([spec("kept")])
    assert (result.unchanged, result.orphaned) == (["kept"], ["old"])
    assert [r.name for r in await backend.list_schedules()] == ["kept", "manual", "old"]


async def test_an_operators_schedule_under_a_declared_name_passes_to_the_code(
    harness: Harness,
) -> None:
    backend = harness.backend
    await backend.create_schedule(spec("nightly", payload={"by": "operator"}))
    result = await backend.sync_code_schedules([spec("nightly", payload={"by": "code"})])
    assert result.updated == ["nightly"]
    row = await backend.get_schedule("nightly")
    assert row is not None and row.declared_in_code and row.payload == {"by": "code"}


async def test_a_name_declared_twice_is_refused(harness: Harness) -> None:
    with pytest.raises(ValueError, match="declared twice: a"):
        await harness.backend.sync_code_schedules([spec("a"), spec("a", cron="*/5 * * * *")])
    assert await harness.backend.list_schedules() == []


# --- the leader's fire ---------------------------------------------------------------------
async def jobs_of(harness: Harness, actor: str = "build_report") -> list[JobRow]:
    return await harness.backend.list_jobs(JobFilter(actor=actor))


async def test_a_schedule_fires_one_job_once_it_is_due(harness: Harness) -> None:
    backend = harness.backend
    await backend.create_schedule(spec(cron=DAILY, payload={"full": True}, queue="reports"))
    assert await backend.fire_due_schedules(10) == []  # not due yet
    await harness.travel(DAY)
    due = await backend.get_schedule("nightly")
    assert due is not None and due.next_fire_at is not None
    [fired] = await backend.fire_due_schedules(10)
    assert (fired.name, fired.fire_at, fired.missed_since) == ("nightly", due.next_fire_at, None)
    assert fired.job_id is not None
    assert fired.next_fire_at == fired.fire_at + timedelta(days=1)
    job = await backend.get(fired.job_id)
    assert job is not None
    assert (job.actor, job.queue, job.payload, job.status) == (
        "build_report",
        "reports",
        {"full": True},
        JobStatus.PENDING,
    )
    assert job.metadata == {"schedule": "nightly", "fire_time": fired.fire_at.isoformat()}
    assert job.unique_key == schedule_job_key("nightly", fired.fire_at)
    # No worker registered the actor: a by-name enqueue's defaults.
    assert (job.retry_kind, job.max_attempts, job.priority) == ("transient", 3, 0)
    row = await backend.get_schedule("nightly")
    assert row is not None
    assert (row.last_fired_at, row.last_job_id, row.next_fire_at) == (
        fired.fire_at,
        job.id,
        fired.next_fire_at,
    )
    assert await backend.fire_due_schedules(10) == []  # the fire time is spent
    assert [j.id for j in await jobs_of(harness)] == [job.id]


async def test_missed_fire_times_make_one_catch_up_job(harness: Harness) -> None:
    backend = harness.backend
    await backend.create_schedule(spec(cron=DAILY))
    await harness.travel(3 * DAY)  # three fire times passed while nobody led
    missed = await backend.get_schedule("nightly")
    assert missed is not None and missed.next_fire_at is not None
    [fired] = await backend.fire_due_schedules(10)
    assert fired.missed_since == missed.next_fire_at
    assert fired.fire_at == missed.next_fire_at + timedelta(days=2)  # the latest one
    assert fired.next_fire_at == fired.fire_at + timedelta(days=1)  # after now
    assert fired.next_fire_at > await harness.now()
    assert len(await jobs_of(harness)) == 1
    assert await backend.fire_due_schedules(10) == []


async def test_the_actors_stored_queue_and_policy_apply_unless_the_schedule_names_a_queue(
    harness: Harness,
) -> None:
    backend = harness.backend
    budget = timedelta(hours=2)
    await backend.sync_actor_configs(
        [
            ActorDeclaration(
                "build_report", "media", {}, None, None, None, "indefinite", 7, budget, 5
            )
        ],
        force=False,
    )
    await backend.create_schedule(spec("stored", cron=DAILY))
    await backend.create_schedule(spec("own", cron=DAILY, queue="reports"))
    await harness.travel(DAY)
    fired = {f.name: f for f in await backend.fire_due_schedules(10)}
    jobs = {}
    for name in ("stored", "own"):
        job_id = fired[name].job_id
        assert job_id is not None
        jobs[name] = await backend.get(job_id)
    stored, own = jobs["stored"], jobs["own"]
    assert stored is not None and own is not None
    assert (stored.queue, own.queue) == ("media", "reports")
    for job in (stored, own):
        assert (job.retry_kind, job.max_attempts, job.priority) == ("indefinite", 7, 5)
        assert job.schedule_to_close == job.created_at + budget


async def test_a_tick_fires_at_most_its_limit_earliest_first(harness: Harness) -> None:
    backend = harness.backend
    for name, cron in [("c", "0 5 * * *"), ("a", "0 3 * * *"), ("b", "0 4 * * *")]:
        await backend.create_schedule(spec(name, cron=cron))
    await harness.travel(DAY)
    first = await backend.fire_due_schedules(2)
    rest = await backend.fire_due_schedules(2)
    order = sorted(first + rest, key=lambda f: f.fire_at)
    assert [f.name for f in first + rest] == [f.name for f in order]
    assert (len(first), len(rest)) == (2, 1)
    assert await backend.fire_due_schedules(2) == []
    with pytest.raises(ValueError, match="limit"):
        await backend.fire_due_schedules(0)


async def test_a_disabled_schedule_does_not_fire_nor_catch_up_when_enabled(
    harness: Harness,
) -> None:
    backend = harness.backend
    await backend.create_schedule(spec(cron=DAILY))
    await backend.update_schedule("nightly", ScheduleUpdate(enabled=False))
    await harness.travel(3 * DAY)
    assert await backend.fire_due_schedules(10) == []
    on = await backend.update_schedule("nightly", ScheduleUpdate(enabled=True))
    assert on is not None and on.next_fire_at is not None
    assert await backend.fire_due_schedules(10) == []  # the disabled days are not made up
    await harness.travel(DAY)
    [fired] = await backend.fire_due_schedules(10)
    assert fired.missed_since is None
    assert len(await jobs_of(harness)) == 1


async def test_a_new_expression_fires_at_its_own_times(harness: Harness) -> None:
    backend = harness.backend
    await backend.create_schedule(spec(cron=DAILY))
    row = await backend.update_schedule("nightly", ScheduleUpdate(cron="0 */6 * * *"))
    assert row is not None and row.next_fire_at is not None
    await harness.travel(6 * 3600)
    [fired] = await backend.fire_due_schedules(10)
    assert fired.fire_at == Schedule("0 */6 * * *").latest_fire(fired.fire_at)
    assert fired.next_fire_at == fired.fire_at + timedelta(hours=6)


async def test_a_fire_time_whose_job_exists_makes_no_second_job(harness: Harness) -> None:
    backend = harness.backend
    await backend.create_schedule(spec(cron=DAILY))
    await harness.travel(DAY)
    due = await backend.get_schedule("nightly")
    assert due is not None and due.next_fire_at is not None
    key = schedule_job_key("nightly", due.next_fire_at)
    held = await backend.enqueue(EnqueueArgs(actor="build_report", unique_key=key))
    [fired] = await backend.fire_due_schedules(10)
    assert (fired.fire_at, fired.job_id) == (due.next_fire_at, None)
    row = await backend.get_schedule("nightly")
    assert row is not None
    assert (row.last_fired_at, row.last_job_id) == (due.next_fire_at, None)
    assert row.next_fire_at == fired.next_fire_at > due.next_fire_at
    assert [j.id for j in await jobs_of(harness)] == [held.id]


# --- daylight saving time (memory: its clock can be set to the night the clocks change) ----
def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


async def travel_to(harness: Harness, when: datetime) -> None:
    if harness.clock is None:
        pytest.skip(
            "needs the clock at a chosen date: Postgres' clock is the server's; the same "
            "rules (due_fire) at these dates: tests/unit/test_schedule_fire.py"
        )
    await harness.travel((when - await harness.now()).total_seconds())


async def test_a_local_time_skipped_by_the_spring_jump_is_not_fired(harness: Harness) -> None:
    backend = harness.backend
    await travel_to(harness, utc("2026-03-28T12:00"))
    row = await backend.create_schedule(spec(cron="30 2 * * *", timezone="Europe/Berlin"))
    # 02:30 does not exist in Berlin on 2026-03-29 (02:00 -> 03:00): next is the 30th.
    assert row.next_fire_at == utc("2026-03-30T00:30")
    await travel_to(harness, utc("2026-03-29T12:00"))
    assert await backend.fire_due_schedules(10) == []
    await travel_to(harness, utc("2026-03-31T12:00"))  # downtime over the 30th and 31st
    [fired] = await backend.fire_due_schedules(10)
    assert (fired.fire_at, fired.missed_since) == (utc("2026-03-31T00:30"), utc("2026-03-30T00:30"))
    assert fired.next_fire_at == utc("2026-04-01T00:30")


async def test_a_local_time_repeated_by_the_autumn_fall_back_fires_once(harness: Harness) -> None:
    backend = harness.backend
    await travel_to(harness, utc("2026-10-24T12:00"))
    await backend.create_schedule(spec(cron="30 2 * * *", timezone="Europe/Berlin"))
    # 02:30 happens twice in Berlin on 2026-10-25: at 00:30 UTC (CEST) and 01:30 UTC (CET).
    await travel_to(harness, utc("2026-10-25T00:30"))
    [fired] = await backend.fire_due_schedules(10)
    assert (fired.fire_at, fired.next_fire_at) == (utc("2026-10-25T00:30"), utc("2026-10-26T01:30"))
    await travel_to(harness, utc("2026-10-25T01:45"))  # past the second 02:30
    assert await backend.fire_due_schedules(10) == []
    assert len(await jobs_of(harness)) == 1
