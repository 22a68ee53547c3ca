"""GatheredCalls: callers that ask for the same kind of write at once share one call.

Each caller hands in its item and awaits its own answer; one task makes the calls, each with
every item that came since the previous one went out (the callers started in the same tick
go together, and the ones that ask while a call is out go in the next). So a lone caller's
call goes out at once, and under load the calls grow instead of queueing one statement per
caller. A call that raises raises in each of its callers; a caller cancelled meanwhile loses
only its answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Answer = TypeVar("Answer")


class GatheredCalls(Generic[Item, Answer]):
    """Items asked for together go to ``call`` together; ``call`` answers each in order."""

    def __init__(
        self, call: Callable[[list[Item]], Awaitable[Sequence[Answer]]], name: str
    ) -> None:
        self.call = call
        self.name = name
        self._items: list[Item] = []
        self._waiters: list[asyncio.Future[Answer]] = []
        self._flushing: asyncio.Task[None] | None = None

    @property
    def idle(self) -> bool:
        """Whether no call is out and nobody waits."""
        return self._flushing is None

    async def ask(self, item: Item) -> Answer:
        """``item``'s answer from the next call (raises what that call raised)."""
        waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._items.append(item)
        self._waiters.append(waiter)
        if self._flushing is None:
            self._flushing = asyncio.create_task(self._flush(), name=self.name)
        return await waiter

    async def _flush(self) -> None:
        """Call for the items gathered, until none is left."""
        try:
            await asyncio.sleep(0)  # the callers started in this tick ask first
            while self._items:
                items, waiters = self._items, self._waiters
                self._items, self._waiters = [], []
                await self._call(items, waiters)
        finally:
            self._flushing = None
            stranded, self._items, self._waiters = self._waiters, [], []
            for waiter in stranded:  # only when cancelled: nobody would call for them
                waiter.cancel()

    async def _call(self, items: list[Item], waiters: list[asyncio.Future[Answer]]) -> None:
        try:
            answers = await self.call(items)
        except Exception as exc:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        except BaseException:
            for waiter in waiters:
                waiter.cancel()
            raise
        for waiter, answer in zip(waiters, answers, strict=True):
            if not waiter.done():  # a caller cancelled meanwhile: its answer goes unused
                waiter.set_result(answer)
