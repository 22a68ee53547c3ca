"""Schedules: the next fire time of a cron expression in its timezone, the daily HH:MM form,
and the errors a bad expression gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from taskq_core.cron_timing import Schedule, check_cron_expression, parse_daily_time, sweep_schedule


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_a_daily_time_fires_today_when_still_ahead_and_tomorrow_once_passed() -> None:
    daily = Schedule.daily("03:00")
    assert daily.next_fire(at("2026-01-01T02:59:59.999")) == at("2026-01-01T03:00")
    assert daily.next_fire(at("2026-01-01T03:00")) == at("2026-01-02T03:00")  # strictly after
    assert daily.next_fire(at("2026-01-01T03:00:00.5")) == at("2026-01-02T03:00")


def test_next_fire_answers_in_utc_whatever_zone_it_is_asked_in() -> None:
    every_hour = Schedule("15 * * * *")
    plus_two = timezone(timedelta(hours=2))
    fire = every_hour.next_fire(datetime(2026, 1, 1, 12, 20, tzinfo=plus_two))
    assert fire == at("2026-01-01T11:15") and fire.tzinfo is UTC


def test_a_naive_datetime_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        Schedule("* * * * *").next_fire(datetime(2026, 1, 1))


def test_a_cron_expression_is_read_in_its_timezone_across_dst() -> None:
    berlin = Schedule("30 2 * * *", timezone="Europe/Berlin")
    assert berlin.next_fire(at("2026-01-10T12:00")) == at("2026-01-11T01:30")  # CET = UTC+1
    assert berlin.next_fire(at("2026-07-10T12:00")) == at("2026-07-11T00:30")  # CEST = UTC+2
    # 02:30 does not exist on 2026-03-29 (02:00 -> 03:00): that day is skipped, not run late.
    assert berlin.next_fire(at("2026-03-28T12:00")) == at("2026-03-30T00:30")
    assert berlin.latest_fire(at("2026-03-29T23:00")) == at("2026-03-28T01:30")
    # 02:30 happens twice on 2026-10-25: it fires once.
    first = berlin.next_fire(at("2026-10-24T12:00"))
    assert first == at("2026-10-25T00:30")
    assert berlin.next_fire(first) == at("2026-10-26T01:30")


def test_the_cron_setting_wins_over_the_daily_time() -> None:
    assert sweep_schedule("03:00", None) == Schedule("0 3 * * *")
    assert sweep_schedule("03:00", "*/5 * * * *") == Schedule("*/5 * * * *")
    assert str(sweep_schedule("04:30", None)) == "30 4 * * * (UTC)"


def test_whitespace_in_an_expression_is_normalized() -> None:
    assert check_cron_expression("  0   3 * * 1-5 ") == "0 3 * * 1-5"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("* * * *", "5-field"),
        ("0 * * * * *", "5-field"),  # a seconds field is not cron's
        ("", "5-field"),
        ("61 * * * *", "bad minute"),
        ("0 24 * * *", "bad hour"),
        ("0 0 31 2 *", "bad day-of-month"),  # February never has a 31st
        ("0 0 * * mon-funday", "not a valid cron expression"),
    ],
)
def test_a_bad_expression_says_what_is_wrong(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        check_cron_expression(expression)
    assert "\n" not in str(caught.value)


def test_an_unknown_timezone_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown timezone 'Mars/Olympus'"):
        Schedule("* * * * *", timezone="Mars/Olympus")


@pytest.mark.parametrize("text", ["3:00", "03:00", "23:59", "00:00"])
def test_daily_times_parse(text: str) -> None:
    hour, minute = parse_daily_time(text)
    assert f"{hour:02d}:{minute:02d}" == text.zfill(5)


@pytest.mark.parametrize("text", ["24:00", "12:60", "12", "12:5", "noon", "-1:00", "12:00:00"])
def test_bad_daily_times_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="HH:MM"):
        parse_daily_time(text)
