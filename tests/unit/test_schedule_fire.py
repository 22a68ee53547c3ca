"""The leader's fire plan of a due schedule (``protocol.schedules.due_fire``), the rule both
backends apply: the latest due fire time, the first missed one, the next one after now. The
daylight-saving dates are here because only the memory backend's clock can be set to them in
the conformance suite; Postgres computes with this same function on its own clock."""

from __future__ import annotations

from datetime import UTC, datetime

from taskq_core.backend.protocol.schedules import DueFire, due_fire

BERLIN_0230 = ("30 2 * * *", "Europe/Berlin")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_a_fire_on_time_has_nothing_missed() -> None:
    plan = due_fire("*/15 * * * *", "UTC", at("2026-05-01T10:15"), at("2026-05-01T10:15:00.3"))
    assert plan == DueFire(at("2026-05-01T10:15"), None, at("2026-05-01T10:30"))


def test_after_downtime_the_latest_missed_time_fires_once() -> None:
    plan = due_fire("*/15 * * * *", "UTC", at("2026-05-01T10:15"), at("2026-05-01T13:07"))
    assert plan == DueFire(at("2026-05-01T13:00"), at("2026-05-01T10:15"), at("2026-05-01T13:15"))


def test_a_fire_exactly_at_now_is_the_latest_and_the_next_is_after_it() -> None:
    plan = due_fire("0 * * * *", "UTC", at("2026-05-01T10:00"), at("2026-05-01T12:00"))
    assert plan == DueFire(at("2026-05-01T12:00"), at("2026-05-01T10:00"), at("2026-05-01T13:00"))


def test_a_planned_time_off_the_grid_is_never_fired_earlier() -> None:
    # next_fire_at from an older expression: the fire stands for the planned time.
    plan = due_fire("0 * * * *", "UTC", at("2026-05-01T10:30"), at("2026-05-01T10:45"))
    assert plan == DueFire(at("2026-05-01T10:30"), None, at("2026-05-01T11:00"))


def test_the_spring_jump_skips_the_nonexistent_time() -> None:
    # Berlin, 2026-03-29: 02:00 -> 03:00, so 02:30 does not exist that day.
    plan = due_fire(*BERLIN_0230, at("2026-03-28T01:30"), at("2026-03-29T12:00"))
    assert plan == DueFire(at("2026-03-28T01:30"), None, at("2026-03-30T00:30"))
    late = due_fire(*BERLIN_0230, at("2026-03-28T01:30"), at("2026-03-30T12:00"))
    assert late == DueFire(at("2026-03-30T00:30"), at("2026-03-28T01:30"), at("2026-03-31T00:30"))


def test_the_autumn_fall_back_fires_the_repeated_time_once() -> None:
    # Berlin, 2026-10-25: 03:00 -> 02:00, so 02:30 happens at 00:30 and 01:30 UTC.
    plan = due_fire(*BERLIN_0230, at("2026-10-25T00:30"), at("2026-10-25T01:45"))
    assert plan == DueFire(at("2026-10-25T00:30"), None, at("2026-10-26T01:30"))
