"""Asking before a command destroys or archives what a filter matched.

``--yes`` goes ahead. Without it, on a terminal (stdin and stdout both), the operator is
asked, with no as the default; in a script the command refuses with one line naming what it
would have done, so a typo (``1m`` for ``1d``) costs nothing.
"""

from __future__ import annotations

import sys

import typer

from taskq_cli import output
from taskq_core.errors import ConfigError


def confirm_or_refuse(question: str, refusal: str, *, yes: bool) -> None:
    """Return to go ahead; raise ConfigError (exit 1, nothing changed) otherwise."""
    if yes:
        return
    if sys.stdin.isatty() and output.stdout.is_terminal:
        if typer.confirm(question, default=False):
            return
        raise ConfigError("not confirmed: nothing was changed")
    raise ConfigError(f"{refusal}; re-run with --yes to do it")
