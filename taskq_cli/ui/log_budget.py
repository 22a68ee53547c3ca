"""Logging that an attacker cannot turn into a flood: at most ``burst`` lines of one kind per
``window`` seconds, the rest counted and reported by the next line let through.

A slowloris once made the admin server log 303,000 tracebacks (140 MB) in 40 seconds: one
per failed ``accept``. ``LogBudget.take`` decides for any line; ``BudgetFilter`` applies it
to the standard ``logging`` records of the loggers a request can make write (uvicorn's,
asyncio's), one kind per logger and level, whatever the message says.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Iterable

DEFAULT_BURST = 10
DEFAULT_WINDOW = 60.0
# The loggers a client can make write: uvicorn's (a malformed request, an error in the app)
# and asyncio's (a failed accept).
CLIENT_DRIVEN_LOGGERS = ("uvicorn.error", "uvicorn.access", "uvicorn.asgi", "asyncio")


class LogBudget:
    """How many lines of each kind may still be written in the current window."""

    # Alike the constructors of LoginThrottle (login_throttle.py) and SessionStore
    # (sessions.py) by shape only: limits and a clock kept as given, different data.
    def __init__(
        self,
        burst: int = DEFAULT_BURST,
        window: float = DEFAULT_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.window = window
        self.clock = clock
        # kind -> [window start, lines written in it, lines held back since the last one]
        self._spent: dict[Hashable, list[float]] = {}

    def take(self, kind: Hashable) -> int | None:
        """None: do not write this line. Otherwise write it, and the number is how many
        lines of its kind were held back since the last one written (0 mostly)."""
        now = self.clock()
        spent = self._spent.get(kind)
        if spent is None or now - spent[0] >= self.window:
            held = 0 if spent is None else int(spent[2])
            self._spent[kind] = [now, 1, 0]
            return held
        if spent[1] < self.burst:
            spent[1] += 1
            held, spent[2] = int(spent[2]), 0
            return held
        spent[2] += 1
        return None


class BudgetFilter(logging.Filter):
    """A ``logging`` filter spending a LogBudget per (logger, level); a line let through
    after others were held back says how many."""

    def __init__(self, budget: LogBudget) -> None:
        super().__init__()
        self.budget = budget

    def filter(self, record: logging.LogRecord) -> bool:
        held = self.budget.take((record.name, record.levelno))
        if held is None:
            return False
        if held:
            record.msg = f"{record.getMessage()} ({held} more like it were not logged)"
            record.args = None
        return True


def bound_client_driven_logs(
    budget: LogBudget, loggers: Iterable[str] = CLIENT_DRIVEN_LOGGERS
) -> BudgetFilter:
    """Put one BudgetFilter on each of ``loggers``; returns it (to take it off again)."""
    budget_filter = BudgetFilter(budget)
    for name in loggers:
        logging.getLogger(name).addFilter(budget_filter)
    return budget_filter


def unbound_client_driven_logs(
    budget_filter: BudgetFilter, loggers: Iterable[str] = CLIENT_DRIVEN_LOGGERS
) -> None:
    """Take ``budget_filter`` off ``loggers`` again."""
    for name in loggers:
        logging.getLogger(name).removeFilter(budget_filter)
