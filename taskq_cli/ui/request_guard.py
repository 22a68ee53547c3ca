"""What the admin UI checks before it routes a request, and before a handler reads JSON.

- **Host.** A ``Host`` header Litestar cannot parse into a URL (``x:abc``,
  ``localhost:99999``, a name with ``/`` in it) is answered 400 here: further in, reading
  the request's URL raises, which was a 500 before any check ran.
- **Path.** The app routes on the path as the client sent it (``paths.canonical_path``),
  not on the server's decoded one, so a name with an encoded ``/`` stays one segment.
- **Head size.** A request line and headers over MAX_HEAD_BYTES are answered 431 here too.
  h11 refuses such a head only while it is incomplete: one that reaches it whole in one
  read (after a keep-alive connection's previous request, say) was let through.
- **JSON depth.** A JSON body nested deeper than MAX_JSON_DEPTH is refused with 400 before
  it is decoded: the decoder's recursion limit otherwise surfaced as a 500.

``RequestGuard`` wraps Litestar's own handler (``app.asgi_handler``), so it runs before
routing; ``AdminRequest`` is the app's request class.
"""

from __future__ import annotations

import json
import re
from typing import Any

from litestar import Request
from litestar.enums import ScopeType
from litestar.exceptions import ClientException
from litestar.types import (
    ASGIApp,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    Receive,
    Scope,
    Send,
)

from taskq_cli.ui.paths import canonical_path
from taskq_cli.ui.security import SECURITY_HEADERS, is_api
from taskq_cli.ui.serving import MAX_HEAD_BYTES

# The request bodies the UI takes are flat (a pause reason); 32 levels is far beyond them.
MAX_JSON_DEPTH = 32
# ``name`` or ``name:port``: a DNS name or IPv4 address, or an IPv6 address in brackets.
_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~-]+)(?::(?P<port>[0-9]*))?")
_MAX_PORT = 65535
# JSON strings (their brackets do not nest), and the brackets that do.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(rb"[\[\]{}]")


def host_problem(value: str) -> str | None:
    """Why a Host header is unusable (None: it is fine)."""
    match = _HOST.fullmatch(value)
    if match is None:
        return "the Host header is not a host name with an optional port"
    port = match.group("port")
    if port and int(port) > _MAX_PORT:
        return f"the Host header's port is above {_MAX_PORT}"
    return None


def json_depth(body: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (strings skipped)."""
    depth = deepest = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub(b"", body)):
        if bracket.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


class RequestGuard:
    """The checks before routing, around Litestar's ASGI handler."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        raw_path = scope.get("raw_path")
        if raw_path is not None:
            scope["path"] = canonical_path(raw_path)
        if head_size(scope) > MAX_HEAD_BYTES:
            reason = f"the request line and headers are over {MAX_HEAD_BYTES} bytes"
            await _bad_request(scope, send, reason, status=431)
            return
        host = _header(scope, b"host")
        problem = None if host is None else host_problem(host)
        if problem is None:
            await self.app(scope, receive, send)
            return
        await _bad_request(scope, send, problem)


def head_size(scope: Scope) -> int:
    """About the bytes of a request's line and headers as sent (names, values, separators)."""
    line = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") + 16
    return line + sum(len(name) + len(value) + 4 for name, value in scope.get("headers", []))


class AdminRequest(Request[Any, Any, Any]):
    """Litestar's request, refusing over-deep JSON (400) before decoding it."""

    async def json(self) -> Any:
        depth = json_depth(await self.body())
        if depth > MAX_JSON_DEPTH:
            raise ClientException(
                f"the JSON body nests {depth} levels deep; at most {MAX_JSON_DEPTH} are taken"
            )
        return await super().json()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


async def _bad_request(scope: Scope, send: Send, reason: str, *, status: int = 400) -> None:
    if is_api(str(scope.get("path", ""))):
        body = json.dumps({"status_code": status, "detail": reason}).encode()
        kind = b"application/json"
    else:
        body, kind = reason.encode(), b"text/plain; charset=utf-8"
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", kind),
            (b"content-length", str(len(body)).encode()),
            *SECURITY_HEADERS,
        ],
    }
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
    await send(start)
    await send(end)
