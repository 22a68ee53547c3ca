"""Dynamic TAB completion of the names an operator types: queues, actors and schedules, from
the database.

As kubectl and gh complete resource names, ``taskq queues pause <TAB>`` offers the queues the
database knows, ``taskq enqueue <TAB>`` the registered actors and ``taskq schedules run <TAB>``
the schedules. The database is asked with the same flags, environment and ``.env`` a command
would use, never starts an embedded server, and gets ``completion_names.BUDGET_SECONDS`` in
all: a slow, absent or unmigrated database offers nothing rather than holding up the shell.

``PARAMETERS`` says which parameter of which command completes which names; ``attach`` hooks
them into a command when the root loads it (tests/cli/test_completions.py checks each
entry still names a parameter).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from taskq_cli.completion_kinds import Names

# (command path below ``taskq``, parameter name) -> the names it completes.
PARAMETERS: dict[tuple[str, str], Names] = {
    ("worker", "queues"): Names.QUEUE,
    ("enqueue", "actor"): Names.ACTOR,
    ("enqueue", "queue"): Names.QUEUE,
    ("cancel", "queue"): Names.QUEUE,
    ("cancel", "actor"): Names.ACTOR,
    ("retry", "queue"): Names.QUEUE,
    ("retry", "actor"): Names.ACTOR,
    ("prune", "queue"): Names.QUEUE,
    ("jobs list", "queue"): Names.QUEUE,
    ("jobs list", "actor"): Names.ACTOR,
    ("jobs move", "to"): Names.QUEUE,
    ("jobs move", "queue"): Names.QUEUE,
    ("jobs move", "actor"): Names.ACTOR,
    ("jobs purge", "queue"): Names.QUEUE,
    ("jobs purge", "actor"): Names.ACTOR,
    ("queues set-mode", "queue"): Names.QUEUE,
    ("queues set-max-concurrent", "queue"): Names.QUEUE,
    ("queues pause", "queue"): Names.QUEUE,
    ("queues resume", "queue"): Names.QUEUE,
    ("actor-config get", "name"): Names.ACTOR,
    ("actor-config set", "name"): Names.ACTOR,
    ("schedules list", "actor"): Names.ACTOR,
    ("schedules show", "name"): Names.SCHEDULE,
    ("schedules add", "actor"): Names.ACTOR,
    ("schedules add", "queue"): Names.QUEUE,
    ("schedules enable", "name"): Names.SCHEDULE,
    ("schedules disable", "name"): Names.SCHEDULE,
    ("schedules delete", "name"): Names.SCHEDULE,
    ("schedules run", "name"): Names.SCHEDULE,
    ("batches list", "queue"): Names.QUEUE,
}


def attach(name: str, command: Any) -> None:
    """Hook the completers of ``PARAMETERS`` into ``command`` (named ``name`` under the root)
    and its sub-commands."""
    for path, each in _walk(name, command):
        for param in each.params:
            names = PARAMETERS.get((path, param.name))
            if names is not None:
                # What typer's ``autocompletion=`` sets on a parameter it builds.
                param._custom_shell_complete = _completer(names)


def _walk(path: str, command: Any) -> list[tuple[str, Any]]:
    """``command`` and every sub-command below it, with their paths."""
    found = [(path, command)]
    for child_name, child in getattr(command, "commands", {}).items():
        found.extend(_walk(f"{path} {child_name}", child))
    return found


def _completer(names: Names) -> Callable[[Any, Any, str], list[str]]:
    def complete(ctx: Any, _param: Any, incomplete: str) -> list[str]:
        # Imported at TAB time only: it loads the database stack.
        from taskq_cli.completion_names import fetch_names

        return [name for name in fetch_names(ctx, names) if name.startswith(incomplete)]

    return complete
