"""When something recurring fires: a 5-field cron expression read in a timezone.

Pure time arithmetic, no I/O: ``Schedule`` (the expression, its zone, the DST rules, the next
and the latest fire times), the checks of an expression, a zone and a daily ``HH:MM``, and the
leader's daily sweeps' schedule (prune, archive expiry: a daily ``HH:MM`` UTC setting, or a
cron setting that overrides it, ``sweep_schedule``). What applications declare and change
(``@cron``, the client's schedule methods) is ``cron_schedules.py``. Parsing errors are
``ValueError`` lines that say what is wrong, for the settings and the CLI to prefix with the
variable or flag.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

CRON_FIELDS = 5  # minute hour day-of-month month day-of-week (no seconds field)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone {name!r}") from None


def check_timezone(name: str) -> str:
    """``name`` when it is an IANA time zone this system knows; else ValueError."""
    _zone(name)
    return name


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
    """A cron expression and the timezone its fields are read in.

    Daylight saving time: a local time that does not exist (02:30 on the night clocks jump
    from 02:00 to 03:00) is skipped, not run late; a local time that happens twice (01:30
    when clocks fall back) fires once for a fixed-time expression, while an expression whose
    hour field is ``*`` keeps firing in real time through the repeated hour (as cron does).
    """

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
        return next(self._fires(after, reverse=False))

    def next_fires(self, after: datetime, count: int) -> list[datetime]:
        """The first ``count`` fire times strictly after ``after``, in UTC."""
        fires = self._fires(after, reverse=False)
        return [next(fires) for _ in range(count)]

    def latest_fire(self, at_or_before: datetime) -> datetime:
        """The last fire time at or before ``at_or_before``, in UTC (a catch-up fires it)."""
        # cronsim steps strictly before its start; a microsecond later includes the instant.
        return next(self._fires(at_or_before + timedelta(microseconds=1), reverse=True))

    def _fires(self, start: datetime, *, reverse: bool) -> Iterator[datetime]:
        """Fire times from ``start`` on (or back), in UTC, without DST substitutes."""
        if start.tzinfo is None:
            raise ValueError("a schedule needs an aware datetime")
        sim = CronSim(self.expression, start.astimezone(_zone(self.timezone)), reverse=reverse)
        for fire in sim:
            # cronsim runs a local time skipped by a jump forward at the jump (03:00 for a
            # 02:30 expression); such a stand-in matches neither field, and is skipped.
            if fire.minute in sim.minutes and fire.hour in sim.hours:
                yield fire.astimezone(UTC)

    def __str__(self) -> str:
        return f"{self.expression} ({self.timezone})"


def sweep_schedule(daily_utc: str, cron_expr: str | None) -> Schedule:
    """A sweep's schedule from its two settings: the cron expression when set, else daily at
    the ``HH:MM`` UTC time."""
    if cron_expr:
        return Schedule(cron_expr)
    return Schedule.daily(daily_utc)
