"""Sub-commands registered by name and imported on first use.

Importing every command module costs most of a second (pydantic settings, asyncpg, the worker
and supervisor stacks), and ``taskq --help``, ``--version`` and every TAB press would pay it.
The root group knows each sub-command by its name, where it lives and its one-line summary;
it imports a module only when that command (or its help, or its completion) is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from difflib import get_close_matches
from importlib import import_module
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

# What a loaded command goes through before use (dynamic completion hooks).
Finisher = Callable[[str, Any], None]


@dataclass(frozen=True)
class LazyCommand:
    """A sub-command of the root: its name, ``module:attribute`` (a command function or a
    ``typer.Typer`` group) and its summary, the first sentence of its help."""

    name: str
    target: str
    summary: str

    def load(self) -> Any:
        """The function or ``typer.Typer`` the target names (imports its module)."""
        module, _, attribute = self.target.partition(":")
        return getattr(import_module(module), attribute)


class LazyGroup(TyperGroup):
    """A TyperGroup whose sub-commands are ``LazyCommand`` entries, built on first use.

    Subclasses set ``entries`` and ``build`` (how an entry's target becomes the click command
    that eager registration would have produced). Listing names, the root's help and the
    completion of command names read the summaries only.
    """

    entries: ClassVar[Sequence[LazyCommand]] = ()
    finishers: ClassVar[Sequence[Finisher]] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._summaries_only = False

    @classmethod
    def build(cls, entry: LazyCommand) -> Any:
        """The click command for ``entry`` (a subclass decides how)."""
        raise NotImplementedError

    def list_commands(self, ctx: Any) -> list[str]:
        eager = [name for name in self.commands if name not in self._entry_names()]
        return eager + [entry.name for entry in self.entries]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        entry = next((e for e in self.entries if e.name == cmd_name), None)
        if entry is None:
            return self.commands.get(cmd_name)
        if self._summaries_only:
            return TyperCommand(entry.name, help=entry.summary, rich_markup_mode=None)
        if cmd_name not in self.commands:
            command = self.build(entry)
            for finish in self.finishers:
                finish(entry.name, command)
            self.commands[cmd_name] = command
        return self.commands[cmd_name]

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except typer.TyperException as exc:
            # typer suggests close names among the commands loaded so far: offer them all.
            message = getattr(exc, "message", None)
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            suggested = isinstance(message, str) and "Did you mean" in message
            if self.suggest_commands and matches and isinstance(message, str) and not suggested:
                names = ", ".join(repr(match) for match in matches)
                text = f"{message.rstrip('.')}. Did you mean {names}?"
                exc.message = text  # type: ignore[attr-defined]
            raise

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with self._summaries():
            super().format_commands(ctx, formatter)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        with self._summaries():
            return super().shell_complete(ctx, incomplete)

    @contextmanager
    def _summaries(self) -> Iterator[None]:
        """Within: ``get_command`` answers with a stand-in carrying the summary alone."""
        self._summaries_only = True
        try:
            yield
        finally:
            self._summaries_only = False

    def _entry_names(self) -> set[str]:
        return {entry.name for entry in self.entries}


def build_under(root_settings: dict[str, Any], entry: LazyCommand) -> Any:
    """The click command ``entry`` becomes when added to a root made with ``root_settings``:
    built through typer's own registration, so it is exactly what ``add_typer`` or
    ``command`` on the real root would have produced."""
    holder = typer.Typer(**root_settings)
    holder.callback()(_no_op)  # a callback keeps a one-command holder a group
    target = entry.load()
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=entry.name)
    else:
        holder.command(entry.name)(target)
    group = typer.main.get_group(holder)
    return group.commands[entry.name]


def _no_op() -> None:
    """The holder's callback (never invoked)."""
