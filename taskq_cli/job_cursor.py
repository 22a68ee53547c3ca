"""The cursor of ``taskq jobs list``: where the next page starts, as one copyable word.

It holds the ``(created_at, id)`` of the last job shown (the listing's order), so a page
is stable while new jobs arrive: they sort before it and never shift later pages.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from uuid import UUID

from taskq_core.errors import ConfigError


def encode(after: tuple[datetime, UUID]) -> str:
    """``created_at`` and id of the last job shown, as URL-safe base64 without padding."""
    created_at, ident = after
    raw = f"{created_at.isoformat()}|{ident}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str) -> tuple[datetime, UUID]:
    """The position a cursor from ``encode`` holds; ConfigError for anything else."""
    text = cursor.strip()
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
        moment, ident = raw.split("|")
        created_at = datetime.fromisoformat(moment)
        if created_at.tzinfo is None:
            raise ValueError("naive time")
        return created_at, UUID(ident)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ConfigError(
            f"--cursor: {cursor!r} is not a cursor (use next_cursor from 'jobs list --json')"
        ) from None
