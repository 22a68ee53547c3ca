"""Sweep locks on every backend: one holder at a time per name, released however the body
ends. (Across backend instances and dead sessions: tests/postgres/test_sweep_locks.py.)"""

from __future__ import annotations

import asyncio

import pytest

from tests.conformance.conftest import Harness

PRUNE = "taskq:prune"
EXPIRY = "taskq:archive_expiry"


async def test_a_second_holder_is_refused_while_the_first_holds(harness: Harness) -> None:
    backend = harness.backend
    async with backend.sweep_lock(PRUNE) as first:
        assert first is True
        async with backend.sweep_lock(PRUNE) as second:
            assert second is False
    async with backend.sweep_lock(PRUNE) as again:
        assert again is True


async def test_a_refused_holder_leaves_the_lock_with_the_first(harness: Harness) -> None:
    backend = harness.backend
    async with backend.sweep_lock(PRUNE) as first:
        assert first
        async with backend.sweep_lock(PRUNE) as second:
            assert not second
        async with backend.sweep_lock(PRUNE) as third:
            assert not third  # the refused one's exit did not release the first's lock


async def test_each_name_is_its_own_lock(harness: Harness) -> None:
    backend = harness.backend
    async with backend.sweep_lock(PRUNE) as prune, backend.sweep_lock(EXPIRY) as expiry:
        assert (prune, expiry) == (True, True)


async def test_the_lock_is_released_when_the_body_raises(harness: Harness) -> None:
    backend = harness.backend
    with pytest.raises(RuntimeError, match="boom"):
        async with backend.sweep_lock(PRUNE) as got:
            assert got
            raise RuntimeError("boom")
    async with backend.sweep_lock(PRUNE) as again:
        assert again


async def test_the_lock_is_released_when_the_body_is_cancelled(harness: Harness) -> None:
    backend = harness.backend
    inside = asyncio.Event()

    async def hold() -> None:
        async with backend.sweep_lock(PRUNE) as got:
            assert got
            inside.set()
            await asyncio.Event().wait()  # until cancelled

    task = asyncio.create_task(hold())
    async with asyncio.timeout(10):
        await inside.wait()
    async with backend.sweep_lock(PRUNE) as meanwhile:
        assert not meanwhile
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with backend.sweep_lock(PRUNE) as again:
        assert again


async def test_two_sweeps_at_once_run_one_body(harness: Harness) -> None:
    backend = harness.backend
    entered = asyncio.Event()
    release = asyncio.Event()
    ran: list[str] = []

    async def sweep(name: str) -> None:
        async with backend.sweep_lock(PRUNE) as got:
            if not got:
                return
            ran.append(name)
            entered.set()
            await release.wait()

    first = asyncio.create_task(sweep("first"))
    async with asyncio.timeout(10):
        await entered.wait()
    await sweep("second")
    release.set()
    await first
    assert ran == ["first"]
