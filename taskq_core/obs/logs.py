"""structlog configuration. Event names are fixed snake_case verb phrases (``worker_started``).

Logs always go to stderr so that ``--json`` output on stdout stays one clean document.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


class _StderrLogger:
    """Writes each rendered line to whatever ``sys.stderr`` is at the time of the call."""

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warning = warn = error = critical = exception = fatal = msg


def _stderr_logger_factory(*_args: Any) -> _StderrLogger:
    return _StderrLogger()


def configure_logging(*, fmt: str = "console", level: str = "INFO") -> None:
    """Route structlog to stderr as JSON lines or human console lines at ``level``."""
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=_stderr_logger_factory,
        cache_logger_on_first_use=False,
    )
    # asyncpg's pool logs a traceback for every failed attempt to reopen its minimum of
    # connections, every second of an outage; the worker reports the outage itself, once
    # (database_unavailable / database_available).
    logging.getLogger("asyncpg.pool").setLevel(logging.ERROR)


def get_logger(component: str) -> Any:
    """A logger bound with the component that emits it."""
    # A lazy proxy: binding now would freeze the default (stdout) configuration.
    return structlog.get_logger(component=component)


def log_crash(logger: Any, event: str, exc: BaseException, **fields: Any) -> None:
    """Log an unexpected error of a service as one event that carries its traceback.

    The traceback is the event's ``exception`` field (one JSON line, or the console renderer's
    block under the line), whatever the log level or ``--debug``: a crash-looping child must
    say where it fails in its own log.
    """
    logger.critical(event, error=f"{type(exc).__name__}: {exc}", exc_info=exc, **fields)
