"""The names TAB completion offers, read from the database within a fixed budget.

Loaded only when a completer runs (``taskq_cli.completion``): it brings the settings and the
database stack with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import TYPE_CHECKING, Any

from taskq_cli.completion_kinds import Names

if TYPE_CHECKING:
    from taskq_core.settings import TaskqSettings

BUDGET_SECONDS = 1.0
# The queries stop a little earlier, to leave the connections time to close.
QUERY_SECONDS = 0.8 * BUDGET_SECONDS


def fetch_names(ctx: Any, names: Names) -> list[str]:
    """The names the database gave within the budget that print as themselves, sorted; none
    when it could not answer.

    The query runs on a daemon thread and hands over each result as it arrives, so the budget
    holds even when closing a connection to a stuck server would block: the shell gets what
    was found in time and the process exits.
    """
    settings = _settings(ctx)
    if settings is None:
        return []
    found: list[str] = []

    def fetch() -> None:
        try:
            asyncio.run(_query(settings, names, found))
        except Exception:  # any failure means "no more candidates", never a message
            pass

    thread = threading.Thread(target=fetch, name="taskq-completion", daemon=True)
    thread.start()
    thread.join(BUDGET_SECONDS)
    # A name holding a control character is not offered: completing it would send the
    # character to the terminal (and a newline would split the shell's list of candidates).
    return sorted({name for name in found if name.isprintable()})


def _settings(ctx: Any) -> TaskqSettings | None:
    """Settings as the command being completed would load them: ``--dsn``/``--schema`` given
    so far (the sub-command's over the root's), then the environment and ``.env``."""
    from taskq_core.obs.logs import configure_logging
    from taskq_core.settings import TaskqSettings

    # Nothing the library logs may reach the terminal in the middle of a command line.
    configure_logging(fmt="console", level="CRITICAL")
    flags: dict[str, str] = {}
    context = ctx
    while context is not None:
        for flag, field in (("dsn", "pg_dsn"), ("schema", "schema_name")):
            value = context.params.get(flag)
            if value and field not in flags:
                flags[field] = value
        context = context.parent
    try:
        return TaskqSettings.load(**flags)
    except Exception:  # bad settings: the command itself will say so
        return None


async def _query(settings: TaskqSettings, names: Names, found: list[str]) -> None:
    """Add the names to ``found`` as the database gives them, stopping short of the budget."""
    from taskq_cli.database import open_backend

    deadline = asyncio.get_running_loop().time() + QUERY_SECONDS
    async with asyncio.timeout_at(deadline), open_backend(settings) as backend:
        if names is Names.SCHEDULE:
            found.extend([schedule.name for schedule in await backend.list_schedules()])
            return
        configs = await backend.list_actor_configs()
        if names is Names.ACTOR:
            found.extend([config.actor for config in configs])
            return
        # Registered actors' queues first: list_queues counts every job, which a large
        # table may not finish in time.
        found.extend([config.queue for config in configs])
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline - QUERY_SECONDS / 4):
                found.extend([queue.name for queue in await backend.list_queues()])
