"""A TCP proxy in front of the test PostgreSQL that a test can cut and restore.

Stopping it closes the listener and aborts every proxied connection, which is what a
client sees when the database host goes away; starting it again on the same port is the
database coming back. ``dsn`` is the proxied DSN.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


class PostgresProxy:
    """Forward 127.0.0.1:<port> to the server a DSN names (Unix socket or TCP)."""

    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        query = dict(parse_qsl(parts.query))
        host = query.pop("host", None) or parts.hostname or "localhost"
        port = int(query.pop("port", None) or parts.port or 5432)
        self._unix_path = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else None
        self._target = (host, port)
        self._parts = parts
        self._query = query
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def dsn(self) -> str:
        """The DSN that goes through the proxy."""
        user = self._parts.username or ""
        password = f":{self._parts.password}" if self._parts.password is not None else ""
        netloc = f"{user}{password}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(("postgresql", netloc, self._parts.path, urlencode(self._query), ""))

    async def start(self) -> None:
        """Listen (on the same port as before, after a stop)."""
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Refuse new connections and cut the open ones."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def __aenter__(self) -> PostgresProxy:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._unix_path is not None:
            up_reader, up_writer = await asyncio.open_unix_connection(self._unix_path)
        else:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._writers.update({writer, up_writer})
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                self._writers.discard(end)
                end.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.transport.abort()
