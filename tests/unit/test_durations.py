from __future__ import annotations

from datetime import timedelta

import pytest

from taskq_core.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("7d", 604800),
        ("1h30m", 5400),
        ("250ms", 0.25),
        ("PT30S", 30),
        ("P1DT2H", 93600),
        ("pt5m", 300),
        ("1.5", 1.5),
        ("0", 0),
    ],
)
def test_parse_duration_accepts_human_and_iso_forms(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "abc", "5x", "P", "PT", "-5s", "5 m s", "1h-2m", "s"])
def test_parse_duration_rejects_garbage_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_format_duration_is_compact() -> None:
    assert format_duration(timedelta(seconds=5400)) == "1h30m"
    assert format_duration(timedelta(milliseconds=250)) == "250ms"
