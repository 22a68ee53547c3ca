"""ActorConfig: the code seeds rows, operators own capacity, structural drift is reported."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from taskq_core.backend.protocol import (
    ActorConfigDrift,
    ActorConfigRow,
    ActorDeclaration,
    RetryKind,
)
from tests.conformance.conftest import Harness


def declare(
    actor: str = "resize",
    queue: str = "media",
    metadata: dict[str, object] | None = None,
    max_concurrent: int | None = 4,
    max_pending: int | None = 100,
    result_ttl: timedelta | None = timedelta(hours=1),
) -> ActorDeclaration:
    return ActorDeclaration(
        actor, queue, metadata or {"v": 1}, max_concurrent, max_pending, result_ttl
    )


async def test_the_first_sync_creates_rows_from_the_code(harness: Harness) -> None:
    backend = harness.backend
    result = await backend.sync_actor_configs([declare(), declare("thumb", "img")], force=False)
    assert result.created == ["resize", "thumb"]
    assert (result.capacity_overrides, result.drift, result.overwritten) == ([], [], False)
    rows = await backend.list_actor_configs()
    assert [row.actor for row in rows] == ["resize", "thumb"]
    row = await backend.get_actor_config("resize")
    assert row is not None
    assert (row.queue, row.metadata) == ("media", {"v": 1})
    assert (row.max_concurrent, row.max_pending, row.result_ttl) == (4, 100, timedelta(hours=1))
    assert row.created_at == row.updated_at or row.created_at <= row.updated_at


async def test_a_second_identical_sync_changes_nothing(harness: Harness) -> None:
    backend = harness.backend
    await backend.sync_actor_configs([declare()], force=False)
    before = await backend.get_actor_config("resize")
    result = await backend.sync_actor_configs([declare()], force=False)
    assert (result.created, result.capacity_overrides, result.drift) == ([], [], [])
    assert await backend.get_actor_config("resize") == before


async def test_stored_capacity_wins_over_a_changed_literal(harness: Harness) -> None:
    backend = harness.backend
    await backend.sync_actor_configs([declare()], force=False)
    await backend.update_actor_config("resize", max_concurrent=20)
    changed = declare(max_concurrent=8, max_pending=50, result_ttl=None)
    result = await backend.sync_actor_configs([changed], force=True)
    assert result.capacity_overrides == [
        ("resize", "max_concurrent", 20, 8),
        ("resize", "max_pending", 100, 50),
        ("resize", "result_ttl", timedelta(hours=1), None),
    ]
    assert result.drift == [] and not result.overwritten
    row = await backend.get_actor_config("resize")
    assert row is not None
    assert (row.max_concurrent, row.max_pending, row.result_ttl) == (20, 100, timedelta(hours=1))


async def test_structural_drift_is_reported_and_kept_without_force(harness: Harness) -> None:
    backend = harness.backend
    await backend.sync_actor_configs([declare()], force=False)
    moved = declare(queue="other", metadata={"v": 2})
    result = await backend.sync_actor_configs([moved], force=False)
    assert result.drift == [
        ActorConfigDrift("resize", "queue", "media", "other"),
        ActorConfigDrift("resize", "metadata", {"v": 1}, {"v": 2}),
    ]
    assert not result.overwritten
    row = await backend.get_actor_config("resize")
    assert row is not None and (row.queue, row.metadata) == ("media", {"v": 1})


async def test_force_overwrites_structural_drift_but_not_capacity(harness: Harness) -> None:
    backend = harness.backend
    await backend.sync_actor_configs([declare()], force=False)
    moved = declare(queue="other", metadata={"v": 2}, max_concurrent=1)
    result = await backend.sync_actor_configs([moved], force=True)
    assert result.overwritten
    assert [d.field for d in result.drift] == ["queue", "metadata"]
    row = await backend.get_actor_config("resize")
    assert row is not None
    assert (row.queue, row.metadata, row.max_concurrent) == ("other", {"v": 2}, 4)


async def test_a_sync_of_nothing_does_nothing(harness: Harness) -> None:
    result = await harness.backend.sync_actor_configs([], force=True)
    assert (result.created, result.drift, result.overwritten) == ([], [], False)
    assert await harness.backend.list_actor_configs() == []


async def test_update_actor_config_sets_clears_and_leaves_fields(harness: Harness) -> None:
    backend = harness.backend
    await backend.sync_actor_configs([declare()], force=False)
    row = await backend.update_actor_config("resize", max_pending=7)
    assert row is not None
    assert (row.max_concurrent, row.max_pending, row.result_ttl) == (4, 7, timedelta(hours=1))
    row = await backend.update_actor_config("resize", max_concurrent=None, result_ttl=None)
    assert row is not None
    assert (row.max_concurrent, row.max_pending, row.result_ttl) == (None, 7, None)
    assert await backend.get_actor_config("resize") == row


async def test_updating_an_unknown_actor_returns_none(harness: Harness) -> None:
    assert await harness.backend.update_actor_config("ghost", max_pending=1) is None
    assert await harness.backend.get_actor_config("ghost") is None


@pytest.mark.parametrize("field", ["max_concurrent", "max_pending"])
async def test_negative_capacity_is_rejected(harness: Harness, field: str) -> None:
    await harness.backend.sync_actor_configs([declare()], force=False)
    with pytest.raises(ValueError):
        await harness.backend.update_actor_config("resize", **{field: -1})


async def test_max_pending_is_read_per_actor_with_a_row(harness: Harness) -> None:
    backend = harness.backend
    assert await backend.get_actor_max_pending() == {}
    await backend.sync_actor_configs(
        [declare("a", max_pending=5), declare("b", max_pending=None)], force=False
    )
    assert await backend.get_actor_max_pending() == {"a": 5, "b": None}
    await backend.update_actor_config("b", max_pending=9)
    assert await backend.get_actor_max_pending() == {"a": 5, "b": 9}


def with_policy(
    decl: ActorDeclaration,
    kind: RetryKind = "transient",
    max_attempts: int = 2,
    budget: timedelta | None = None,
    priority: int = 5,
) -> ActorDeclaration:
    return replace(
        decl,
        retry_kind=kind,
        max_attempts=max_attempts,
        retry_time_budget=budget,
        priority=priority,
    )


def policy_of(row: ActorConfigRow | None) -> tuple[object, ...]:
    assert row is not None
    return (row.retry_kind, row.max_attempts, row.retry_time_budget, row.priority)


async def test_sync_stores_the_code_retry_policy_and_priority(harness: Harness) -> None:
    backend = harness.backend
    await backend.sync_actor_configs([with_policy(declare())], force=False)
    assert policy_of(await backend.get_actor_config("resize")) == ("transient", 2, None, 5)
    (listed,) = await backend.list_actor_configs()
    assert policy_of(listed) == ("transient", 2, None, 5)


async def test_a_later_sync_updates_the_policy_without_calling_it_drift(harness: Harness) -> None:
    """A rolling deploy that changes the retry policy just writes it: the code owns it."""
    backend = harness.backend
    await backend.sync_actor_configs([with_policy(declare())], force=False)
    before = await backend.get_actor_config("resize")
    changed = with_policy(declare(), "indefinite", 1, timedelta(hours=2), priority=-1)
    result = await backend.sync_actor_configs([changed], force=False)
    assert (result.created, result.capacity_overrides, result.drift) == ([], [], [])
    assert not result.overwritten
    row = await backend.get_actor_config("resize")
    assert policy_of(row) == ("indefinite", 1, timedelta(hours=2), -1)
    assert row is not None and before is not None and row.updated_at >= before.updated_at
    # Capacity stays the operator's.
    assert (row.max_concurrent, row.max_pending) == (before.max_concurrent, before.max_pending)


async def test_a_row_without_a_policy_gets_one_at_the_next_sync(harness: Harness) -> None:
    """Rows from before the policy was stored (or from a declaration without one) are None
    until a worker that declares a policy starts."""
    backend = harness.backend
    await backend.sync_actor_configs([declare()], force=False)
    assert policy_of(await backend.get_actor_config("resize")) == (None, None, None, None)
    await backend.sync_actor_configs([with_policy(declare(), max_attempts=4)], force=False)
    assert policy_of(await backend.get_actor_config("resize")) == ("transient", 4, None, 5)


async def test_drift_that_refuses_the_start_leaves_the_stored_policy(harness: Harness) -> None:
    backend = harness.backend
    await backend.sync_actor_configs([with_policy(declare())], force=False)
    moved = with_policy(declare(queue="other"), max_attempts=9)
    result = await backend.sync_actor_configs([moved], force=False)
    assert [d.field for d in result.drift] == ["queue"]
    assert policy_of(await backend.get_actor_config("resize")) == ("transient", 2, None, 5)
    # A forced start writes both the structural fields and the policy.
    await backend.sync_actor_configs([moved], force=True)
    row = await backend.get_actor_config("resize")
    assert policy_of(row) == ("transient", 9, None, 5)
    assert row is not None and row.queue == "other"
