"""The Backend protocol's methods are named verb first, one verb per kind of act.

Reads: ``get_`` one thing, ``list_`` many, ``count_``, ``search_`` (a filtered page),
``poll_`` (what arrived since a mark), ``has_`` (a yes or no). Writes name what they do
(``mark_``, ``enqueue``, ``release_``, ``reclaim_``, ``prune_``, ...). A new method whose
name starts with a noun (``dashboard_stats``, ``queue_caps``) fails here: say what it does.
"""

from __future__ import annotations

import inspect

from taskq_core.backend.protocol import Backend

READS = {"get", "list", "count", "search", "poll", "has"}
WRITES = {
    "acquire", "apply", "cancel", "close", "complete", "create", "delete", "dispatch", "end",
    "enqueue", "expire", "extend", "fail", "fire", "heartbeat", "mark", "move", "promote",
    "prune", "purge", "reclaim", "record", "register", "release", "replace", "retry", "sweep",
    "sync", "try", "update", "vacuum", "write",
}  # fmt: skip


def _methods() -> list[str]:
    return [
        name
        for name, member in inspect.getmembers(Backend)
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    ]


def test_every_protocol_method_starts_with_a_known_verb() -> None:
    methods = _methods()
    assert len(methods) > 80  # the protocol's methods were found at all
    assert sorted(m for m in methods if m.split("_")[0] not in READS | WRITES) == []


def test_every_verb_is_used() -> None:
    verbs = {m.split("_")[0] for m in _methods()}
    assert (READS | WRITES) - verbs == set()
