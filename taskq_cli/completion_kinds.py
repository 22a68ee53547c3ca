"""What a parameter's TAB completion offers: the one enum shared by the completers
(``completion``, loaded at start-up) and the query that answers them (``completion_names``,
loaded at TAB time), so that neither imports the other's module for it."""

from __future__ import annotations

from enum import Enum


class Names(Enum):
    """What a parameter completes."""

    QUEUE = "queue"
    ACTOR = "actor"
    SCHEDULE = "schedule"
