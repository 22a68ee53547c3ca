"""Servers made ahead for the browser tests: while one test runs, the next one's schema is
created and migrated and its ``taskq ui serve`` boots in the background, so a test starts
on a server that already listens (booting one takes a second or more of imports).

Every server still has a schema of its own, used by one test and dropped after it; only
the default server (no token, actions on) is made ahead, the variants on demand.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor

from tests.conftest import PgTarget, create_migrated_schema, drop_schema
from tests.ui.server import UiServer


class SpareServers:
    """``take()`` a server over a fresh schema; ``release()`` it after the test."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ui-spare")
        self._spare: Future[UiServer] | None = None
        self._releases: list[Future[None]] = []

    def _new(self, token: str | None, read_only: bool) -> UiServer:
        schema = asyncio.run(create_migrated_schema(self._dsn))
        return UiServer.start(PgTarget(self._dsn, schema), token=token, read_only=read_only)

    def _ahead(self) -> UiServer:
        server = self._new(None, False)
        server.wait_ready()
        return server

    def take(self, *, token: str | None = None, read_only: bool = False) -> UiServer:
        """A server with these options; the default one comes ready from the spare."""
        if token is None and not read_only and self._spare is not None:
            server = self._spare.result()
            self._spare = None
        else:
            server = self._new(token, read_only)  # boots while the test seeds
        if self._spare is None:
            self._spare = self._pool.submit(self._ahead)
        return server

    def _drop(self, server: UiServer) -> None:
        server.stop()
        asyncio.run(drop_schema(self._dsn, server.target.schema))

    def release(self, server: UiServer) -> None:
        """Stop the server and drop its schema, in the background."""
        self._releases.append(self._pool.submit(self._drop, server))

    def close(self) -> None:
        """Release the unused spare and wait for every release."""
        if self._spare is not None:
            self.release(self._spare.result())
            self._spare = None
        for release in self._releases:
            release.result()
        self._pool.shutdown()
