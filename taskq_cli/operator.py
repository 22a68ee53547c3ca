"""Who is acting: the ``user@host`` of this shell, recorded with every operator write
(job events, the queue pause note, the operator log) together with its ``--reason``."""

from __future__ import annotations

import getpass
import socket
from typing import Annotated

import typer

from taskq_cli import inputs
from taskq_core.backend.protocol.admin import Audit

ReasonOption = Annotated[
    str | None,
    typer.Option("--reason", help="Why (recorded with who did it, shown by jobs show)."),
]


def operator_id() -> str:
    """``user@host`` of this shell (``unknown@host`` when the uid has no name, as in some
    containers)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def audit(reason: str | None) -> Audit:
    """Who (this shell) and why (``--reason``, checked) for an operator write."""
    return Audit(by=operator_id(), reason=inputs.optional_text(reason, "--reason"))
