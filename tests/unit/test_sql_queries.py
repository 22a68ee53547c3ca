"""The named SQL queries: fragments shared by several reads are included where asked."""

from __future__ import annotations

import pytest

from taskq_core.backend.postgres import queries


def test_every_fragment_is_included_and_none_is_left_unresolved() -> None:
    loaded = queries._load_all()
    assert not [name for name, body in loaded.items() if "{fragment:" in body]
    # The two reads that find every queue and its oldest pending job share one text.
    for name in ("get_dashboard_stats", "fleet_queues"):
        assert "pending_heads AS (" in loaded[name]


def test_an_unknown_fragment_is_refused() -> None:
    with pytest.raises(RuntimeError, match="unknown SQL fragment 'nope'"):
        queries._include("SELECT 1 {fragment:nope}", {})
