"""When something recurring fires: a 5-field cron expression read in a timezone.

The leader's daily sweeps (prune, archive expiry) take their schedule from a daily ``HH:MM``
UTC setting or a cron setting that overrides it (``sweep_schedule``); cron schedules of actors
use the same ``Schedule`` with their own timezone. Parsing errors are ``ValueError`` lines
that say what is wrong, for the settings and the CLI to prefix with the variable or flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

CRON_FIELDS = 5  # minute hour day-of-month month day-of-week (no seconds field)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone {name!r}") from None


def check_cron_expression(expression: str, timezone: str = "UTC") -> str:
    """``expression`` with its whitespace normalized, when it is a 5-field cron expression
    that fires at least once; else ValueError naming the problem."""
    text = " ".join(expression.split())
    if len(text.split()) != CRON_FIELDS:
        raise ValueError("expected a 5-field cron expression (minute hour day month weekday)")
    start = datetime.now(_zone(timezone))
    try:
        next(CronSim(text, start))
    except (CronSimError, StopIteration) as exc:
        reason = str(exc).lower() or "it never fires"
        raise ValueError(f"not a valid cron expression: {reason}") from None
    return text


def parse_daily_time(text: str) -> tuple[int, int]:
    """``HH:MM`` (24-hour) as (hour, minute); else ValueError."""
    hours, sep, minutes = text.strip().partition(":")
    if (
        sep
        and hours.isdigit()
        and minutes.isdigit()
        and len(minutes) == 2
        and int(hours) < 24
        and int(minutes) < 60
    ):
        return int(hours), int(minutes)
    raise ValueError("expected HH:MM (24-hour clock, UTC)")


@dataclass(frozen=True)
class Schedule:
    """A cron expression and the timezone its fields are read in (DST as Debian cron: a
    fire time skipped by a jump forward runs once after it, a repeated hour fires once)."""

    expression: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "expression", check_cron_expression(self.expression, self.timezone)
        )

    @classmethod
    def daily(cls, hhmm: str) -> Schedule:
        """Every day at ``HH:MM`` UTC."""
        hour, minute = parse_daily_time(hhmm)
        return cls(f"{minute} {hour} * * *")

    def next_fire(self, after: datetime) -> datetime:
        """The first fire time strictly after ``after`` (an aware datetime), in UTC."""
        if after.tzinfo is None:
            raise ValueError("next_fire needs an aware datetime")
        local = after.astimezone(_zone(self.timezone))
        fire: datetime = next(CronSim(self.expression, local))
        return fire.astimezone(UTC)

    def __str__(self) -> str:
        return f"{self.expression} ({self.timezone})"


def sweep_schedule(daily_utc: str, cron_expr: str | None) -> Schedule:
    """A sweep's schedule from its two settings: the cron expression when set, else daily at
    the ``HH:MM`` UTC time."""
    if cron_expr:
        return Schedule(cron_expr)
    return Schedule.daily(daily_utc)
