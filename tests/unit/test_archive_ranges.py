"""The archive's partition ranges: how wide they are for a retention, how they tile the
calendar, how a range is clipped to fit beside one of another width, and when a job's
storage ends (the memory backend's rule, PostgreSQL's partition end)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from taskq_core.backend.postgres.archive_partitions import covering, range_to_make
from taskq_core.backend.protocol.retention import (
    archive_partition_days,
    archive_range,
    archive_storage_ends,
)

DAY = timedelta(days=1)


def test_a_range_is_a_day_up_to_a_month_of_retention_then_a_thirtieth_of_it() -> None:
    assert archive_partition_days(timedelta(seconds=1000)) == 1
    assert archive_partition_days(timedelta(days=30)) == 1
    assert archive_partition_days(timedelta(days=31)) == 2
    assert archive_partition_days(timedelta(days=90)) == 3
    assert archive_partition_days(timedelta(days=365)) == 13
    assert archive_partition_days(timedelta(days=5 * 365)) == 28  # at most four weeks


@given(
    day=st.dates(min_value=date(2000, 1, 1), max_value=date(2100, 1, 1)),
    width=st.integers(min_value=1, max_value=28),
)
def test_ranges_of_one_width_tile_the_calendar(day: date, width: int) -> None:
    starts, ends = archive_range(day, width)
    assert starts <= day < ends and ends - starts == width * DAY
    assert archive_range(starts, width) == (starts, ends)
    assert archive_range(ends, width)[0] == ends  # the next range begins where this one ends


def test_a_range_is_clipped_to_fit_between_ranges_of_another_width() -> None:
    day = date(2027, 3, 10)
    starts, ends = archive_range(day, 13)
    before = (starts - 5 * DAY, starts + 2 * DAY)  # overlaps the aligned range's start
    after = (day + 3 * DAY, day + 4 * DAY)
    made = range_to_make(day, 13, [before, after])
    assert made == (before[1], after[0])
    assert covering(day, [before, made, after]) == made
    assert range_to_make(day, 13, []) == (starts, ends)


def test_storage_ends_with_the_range_of_the_expiry_day() -> None:
    archived = datetime(2027, 3, 10, 15, 30, tzinfo=UTC)
    short = archived + timedelta(hours=1)
    assert archive_storage_ends(short, archived) == datetime(2027, 3, 11, tzinfo=UTC)
    year = archived + timedelta(days=365)
    ends = archive_storage_ends(year, archived)
    assert year < ends <= year + 13 * DAY
    assert ends == datetime.combine(archive_range(year.date(), 13)[1], datetime.min.time(), UTC)
