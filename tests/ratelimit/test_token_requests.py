"""Admissions that ask one bucket at once share one store call, and each gets its own answer:
a token while they last, else its place in the line; a store error reaches every caller."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.protocol.ratelimit import LimitGrant
from taskq_core.clock import FakeClock
from taskq_core.ratelimit import coalesce
from taskq_core.ratelimit.coalesce import TokenRequests


class CountingStore:
    """The memory store, counting the calls that reach it."""

    def __init__(self) -> None:
        self.backend = InMemoryBackend(clock=FakeClock())
        self.calls: list[int] = []
        self.costs: list[list[int]] = []
        self.fail: Exception | None = None

    async def acquire_token(self, key: str, rate: float, burst: float, cost: int = 1) -> LimitGrant:
        return (await self.acquire_tokens(key, rate, burst, [cost]))[0]

    async def acquire_tokens(
        self, key: str, rate: float, burst: float, costs: Sequence[int]
    ) -> list[LimitGrant]:
        self.calls.append(len(costs))
        self.costs.append(list(costs))
        await asyncio.sleep(0)  # a round trip: other callers may ask meanwhile
        if self.fail is not None:
            raise self.fail
        return await self.backend.acquire_tokens(key, rate, burst, costs)

    async def acquire_window(
        self, key: str, limit: int, window: object, cost: int = 1
    ) -> LimitGrant:
        raise AssertionError("not asked here")


async def test_callers_at_once_share_one_call_and_get_answers_in_order() -> None:
    store = CountingStore()
    requests = TokenRequests(store)  # type: ignore[arg-type]
    grants = await asyncio.gather(*(requests.take("api", 1.0, 3.0) for _ in range(5)))
    assert store.calls == [5]
    assert [grant.allowed for grant in grants] == [True, True, True, False, False]
    assert grants[3].retry_after < grants[4].retry_after  # successive places of the line


async def test_callers_that_ask_while_a_call_is_out_go_together_in_the_next() -> None:
    store = CountingStore()
    requests = TokenRequests(store)  # type: ignore[arg-type]
    first = asyncio.ensure_future(requests.take("api", 1.0, 10.0))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the first call is out now
    later = [asyncio.ensure_future(requests.take("api", 1.0, 10.0)) for _ in range(3)]
    await asyncio.gather(first, *later)
    assert store.calls == [1, 3]
    assert all(task.result().allowed for task in [first, *later])


async def test_a_store_error_reaches_every_caller_of_the_call() -> None:
    store = CountingStore()
    store.fail = ConnectionError("store away")
    requests = TokenRequests(store)  # type: ignore[arg-type]
    results = await asyncio.gather(
        *(requests.take("api", 1.0, 3.0) for _ in range(3)), return_exceptions=True
    )
    assert store.calls == [3]
    assert all(isinstance(result, ConnectionError) for result in results)
    store.fail = None  # the next callers ask again
    assert (await requests.take("api", 1.0, 3.0)).allowed


async def test_buckets_are_asked_apart() -> None:
    store = CountingStore()
    requests = TokenRequests(store)  # type: ignore[arg-type]
    await asyncio.gather(requests.take("a", 1.0, 1.0), requests.take("b", 1.0, 1.0))
    assert sorted(store.calls) == [1, 1]


@pytest.mark.parametrize("cancelled", [0, 1])
async def test_a_cancelled_caller_leaves_the_others_their_answers(cancelled: int) -> None:
    store = CountingStore()
    requests = TokenRequests(store)  # type: ignore[arg-type]
    tasks = [asyncio.ensure_future(requests.take("api", 1.0, 3.0)) for _ in range(2)]
    await asyncio.sleep(0)
    tasks[cancelled].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[cancelled], asyncio.CancelledError)
    assert done[1 - cancelled].allowed  # type: ignore[union-attr]


async def test_gathered_callers_each_take_their_own_cost() -> None:
    store = CountingStore()
    requests = TokenRequests(store)  # type: ignore[arg-type]
    grants = await asyncio.gather(
        requests.take("api", 1.0, 10.0, 4),
        requests.take("api", 1.0, 10.0, 1),
        requests.take("api", 1.0, 10.0, 6),
        requests.take("api", 1.0, 10.0, 1),
    )
    assert store.costs == [[4, 1, 6, 1]]  # one call, each caller's cost in its order
    assert [grant.allowed for grant in grants] == [True, True, False, False]
    assert grants[2].retry_after < grants[3].retry_after


async def test_idle_buckets_are_let_go_once_many_were_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(coalesce, "KEPT", 2)
    store = CountingStore()
    requests = TokenRequests(store)  # type: ignore[arg-type]
    for key in ("a", "b", "c", "d"):
        assert (await requests.take(key, 1.0, 1.0)).allowed
    assert len(requests._buckets) <= 2
