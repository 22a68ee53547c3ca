"""ActorThread: the executor thread a plain ``def`` actor runs on, held while its DI resolves.

A THREAD-scoped provider gives one instance per thread that runs actors. So before a plain
``def`` actor's dependencies resolve, the consumer claims an executor thread; resolution runs
on the event loop with that thread's THREAD container, and the thread itself calls the
THREAD-scoped factories (a thread-bound resource is made where it is used). Then the thread
runs the actor body. ``release()`` frees a thread whose actor never got to run.

Everything the thread runs for the job runs in the context it was given (a copy of the
consumer's, made while the job's log fields are bound), since context variables do not
cross into an executor thread by themselves.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any

_RELEASE = object()  # the inbox item that frees the thread without running a body


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the waiter was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class ActorThread:
    """One held executor thread: DI calls in, then the actor body (a ThreadSeat for di)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, context: contextvars.Context | None = None
    ) -> None:
        self._loop = loop
        self._context = context or contextvars.copy_context()
        self._claimed: asyncio.Future[int] = loop.create_future()
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ident = 0

    @property
    def ident(self) -> int:
        """``threading.get_ident()`` of the held thread (known once ``claimed`` returned)."""
        return self._ident

    def serve(self) -> Any:
        """The thread's side (what the executor runs): report in, make what DI asks for, then
        return what the actor body returns (None when released first)."""
        self._reply(self._claimed, threading.get_ident(), None)
        while True:
            item = self._inbox.get()
            if item is _RELEASE:
                return None
            fn, reply = item
            if reply is None:
                return self._context.run(fn)  # the body: its outcome is the executor future's
            try:
                result = self._context.run(fn)
            except BaseException as exc:  # handed to the awaiting resolver on the loop
                self._reply(reply, None, exc)
            else:
                self._reply(reply, result, None)

    async def claimed(self) -> int:
        """Wait until an executor thread picked this seat up; return its ident."""
        self._ident = await self._claimed
        return self._ident

    async def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the held thread (a THREAD-scoped factory step) and return its result."""
        reply: asyncio.Future[Any] = self._loop.create_future()
        self._inbox.put((fn, reply))
        return await reply

    def run(self, body: Callable[[], Any]) -> None:
        """Hand the thread the actor body; the executor future settles with its outcome."""
        self._inbox.put((body, None))

    def release(self) -> None:
        """Free the thread if it has not run a body yet (a no-op once it has)."""
        self._inbox.put(_RELEASE)

    def _reply(self, future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        try:
            self._loop.call_soon_threadsafe(_settle, future, result, error)
        except RuntimeError:
            pass  # the loop is closed: the worker is gone and nobody waits
