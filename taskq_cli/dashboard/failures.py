"""How a dashboard tells an outage from a bug when a read fails.

A connection problem (the database cannot be reached right now) shows as a banner while
the dashboard keeps retrying; anything else is reported with its type.
"""

from __future__ import annotations

from taskq_core.errors import TRANSIENT_ERRORS

# Failures that mean "the database cannot be reached right now" rather than a bug: the app
# says so in its banner and keeps retrying.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = TRANSIENT_ERRORS


def describe_failure(error: BaseException, timeout: float) -> tuple[bool, str]:
    """(is it a connection problem, one line saying what went wrong) for a failed read."""
    if isinstance(error, TimeoutError):
        return True, f"no answer within {timeout:g}s"
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, CONNECTION_ERRORS):
        return True, text
    return False, f"{type(error).__name__}: {text}"
