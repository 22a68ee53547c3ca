"""A small HTTP server for the fleet metrics (``taskq metrics serve``): ``GET /metrics``.

Plain asyncio, one request per connection, like the worker's health server: a scrape target
needs nothing more. Another server (the web UI) mounts ``FleetMetrics.exposition`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno

from taskq_core.errors import ConfigError
from taskq_core.obs.fleet import FleetMetrics
from taskq_core.obs.logs import get_logger

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}
# How long a client gets to send its request line and headers.
REQUEST_TIMEOUT = 5.0
# A request with more header lines than this is cut off (nothing here needs many).
MAX_HEADER_LINES = 100
_INDEX = (
    b"<html><head><title>TaskQ fleet metrics</title></head><body>"
    b'<h1>TaskQ fleet metrics</h1><p><a href="/metrics">/metrics</a></p></body></html>\n'
)


class FleetServer:
    """Serves ``FleetMetrics`` over HTTP on ``host:port`` (port 0: any free port)."""

    def __init__(self, metrics: FleetMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._log = get_logger("fleet_metrics")

    async def start(self) -> None:
        """Bind and listen. ConfigError (one line) when the address cannot be bound."""
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as exc:
            reason = "it is in use" if exc.errno == errno.EADDRINUSE else exc.strerror or exc
            raise ConfigError(f"cannot listen on {self.host}:{self.port}: {reason}") from None
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and close the server."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    @property
    def url(self) -> str:
        """Where Prometheus scrapes this server."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                request = await reader.readline()
                headers = await _read_headers(reader)
            parts = request.decode("latin-1").split()
            method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            try:
                status, content_type, body = await self.route(method, target, headers.get("accept"))
            except Exception as exc:  # a bug here must not take the server down
                self._log.error("fleet_metrics_request_failed", error=repr(exc))
                status, content_type, body = 500, "text/plain; charset=utf-8", b"error\n"
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode() + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (TimeoutError, ConnectionError, ValueError):
            pass  # a client that is too slow, hangs up or sends garbage gets nothing
        finally:
            writer.close()

    async def route(self, method: str, target: str, accept: str | None) -> tuple[int, str, bytes]:
        """Answer one request: (status, content type, body)."""
        if method not in ("GET", "HEAD"):
            return 405, "text/plain; charset=utf-8", b"GET only\n"
        path = target.split("?")[0]
        if path == "/metrics":
            content_type, body = await self.metrics.exposition(accept)
            return 200, content_type, body
        if path == "/":
            return 200, "text/html; charset=utf-8", _INDEX
        return 404, "text/plain; charset=utf-8", b"not found: the metrics are at /metrics\n"


async def _read_headers(reader: asyncio.StreamReader) -> dict[str, str]:
    """The request's headers, names lowercased (the last of a repeated one wins)."""
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADER_LINES):
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            return headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    raise ValueError("too many header lines")
