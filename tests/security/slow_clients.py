"""Slowloris for the tests: connections that send the start of a request and then one more
header line now and then, never the blank line that ends the headers.

``SlowClients(host, port, count)`` keeps ``count`` such connections open; one the server
closes is opened again (after a short pause, as a patient attacker would), so the server
never sees fewer. ``opened()`` waits until every one of them has connected and sent its
first bytes at least once; ``cut`` counts the connections the server closed, and
``wait_cut(n)`` waits until it closed ``n``.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

# The start of a request, and what is dripped after it.
REQUEST_START = b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\n"
HEADER_LINE = b"X-Slow: a\r\n"
# Between two header lines of one connection, and before a connection is opened again.
DRIP_SECONDS = 1.0
REOPEN_SECONDS = 0.5


class SlowClients:
    """``count`` slow connections to ``host:port`` while the ``async with`` block runs."""

    def __init__(self, host: str, port: int, count: int) -> None:
        self.host = host
        self.port = port
        self.count = count
        self.cut = 0
        self._cut_changed = asyncio.Condition()
        self._started: set[int] = set()
        self._all_started = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> SlowClients:
        self._tasks = [asyncio.create_task(self._connection(i)) for i in range(self.count)]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def opened(self, timeout: float = 120.0) -> None:
        """Return once every connection has connected and sent the start of its request."""
        async with asyncio.timeout(timeout):
            await self._all_started.wait()

    async def wait_cut(self, count: int, timeout: float = 120.0) -> None:
        """Return once the server has closed ``count`` of the connections."""
        async with asyncio.timeout(timeout), self._cut_changed:
            await self._cut_changed.wait_for(lambda: self.cut >= count)

    async def _connection(self, index: int) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port)
            except OSError:
                await asyncio.sleep(REOPEN_SECONDS)  # the attacker tries again
                continue
            try:
                writer.write(REQUEST_START)
                await writer.drain()
                self._started.add(index)
                if len(self._started) == self.count:
                    self._all_started.set()
                while True:
                    # Read what the server says (nothing, or its end) while dripping.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(DRIP_SECONDS):
                            if not await reader.read(4096):
                                break  # the server closed it
                    writer.write(HEADER_LINE)
                    await writer.drain()
            except OSError:
                pass  # reset by the server
            finally:
                writer.close()
            async with self._cut_changed:
                self.cut += 1
                self._cut_changed.notify_all()
            await asyncio.sleep(REOPEN_SECONDS)
