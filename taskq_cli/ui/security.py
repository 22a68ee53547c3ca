"""Who may use the admin UI, and how a browser is kept from being used against it.

One middleware sees every request before its handler:

- **Host.** Without a token the server answers only the Host names it is reached by
  (loopback, the bind address, TASKQ_ADMIN_URL's host): a page elsewhere that points its own
  name at 127.0.0.1 (DNS rebinding) gets 400 instead of our data.
- **Token.** With TASKQ_ADMIN_TOKEN every request but ``/static`` and the login form
  carries it: ``Authorization: Bearer <token>`` (API clients, scrapers), or the session
  cookie the login form sets: a random value the server holds (sessions.py), never the
  token; HttpOnly and SameSite=Strict, ended on the server by signing out. Tokens are
  compared in constant time, and a client that keeps giving wrong ones is locked out for
  a while and logged (sign_ins.py, login_throttle.py): 429 with ``Retry-After``. A page
  without a credential is sent to ``/login``; ``/api`` and ``/metrics`` answer 401 JSON.
- **Cross-site requests.** Every POST made with the cookie (or with no token at all) must
  come from our own pages: a browser says where a request comes from in ``Sec-Fetch-Site``
  (every current browser) and ``Origin``, which a page cannot forge, so a POST whose
  ``Sec-Fetch-Site`` is not ``same-origin``, or whose ``Origin`` is not this server's, is
  refused (403). Chosen over a double-submit token because it needs no state, no token
  threaded through every form and htmx request, and covers the login form too; the
  SameSite=Strict cookie is the second line (a cross-site POST carries no session at all).
  A request with neither header comes from no browser (curl, a script): it cannot be
  forged by a page, so it passes. Bearer requests are not browsers' ambient credentials
  and need no check.
- **Read-only.** ``--read-only`` refuses every POST but login and logout (403); the
  templates hide the actions.

Every response carries a Content-Security-Policy that allows scripts only from
``/static`` (a value that slipped past escaping still could not run), refuses framing
(no clickjacking of the action buttons) and sends no referrer to other sites.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.response.base import ASGIResponse
from litestar.response.redirect import ASGIRedirectResponse
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from taskq_cli.ui.config import UiConfig
from taskq_cli.ui.sessions import SESSION_COOKIE
from taskq_cli.ui.sign_ins import SignIns

LOGIN_PATH = "/login"
LOGOUT_PATH = "/logout"
STATIC_PREFIX = "/static/"
# Reachable without a token: the form that asks for it, and the way out.
_OPEN_PATHS = frozenset({LOGIN_PATH, LOGOUT_PATH})
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        b"img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
        b"frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)

Credential = Literal["bearer", "cookie"]
Connection = ASGIConnection[Any, Any, Any, Any]


def session_cookie(value: str, lifetime: timedelta, *, secure: bool) -> Cookie:
    """The cookie of a session just opened (``value``: SessionStore.open's)."""
    return Cookie(
        key=SESSION_COOKIE,
        value=value,
        max_age=int(lifetime.total_seconds()),
        path="/",
        httponly=True,
        samesite="strict",
        secure=secure,
    )


def expired_cookie(*, secure: bool) -> Cookie:
    """What logging out sets: the session cookie, gone."""
    return Cookie(
        key=SESSION_COOKIE,
        value="",
        max_age=0,
        path="/",
        httponly=True,
        samesite="strict",
        secure=secure,
    )


def safe_next(value: str | None) -> str:
    """Where to go after logging in: a path on this server, or ``/`` (never another site:
    ``//host`` and ``/\\host`` are other sites to a browser)."""
    if (
        not value
        or not value.startswith("/")
        or value.startswith("//")
        or "\\" in value
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)
    ):
        return "/"
    return value


def login_url(next_path: str) -> str:
    """The login form, coming back to ``next_path`` afterwards."""
    next_path = safe_next(next_path)
    return LOGIN_PATH if next_path == "/" else f"{LOGIN_PATH}?next={quote(next_path, safe='/')}"


def is_api(path: str) -> bool:
    """Paths machines read (JSON, metrics): they get status codes, never redirects."""
    return path == "/api" or path.startswith("/api/") or path == "/metrics"


def client_address(connection: Connection) -> str:
    """Who is asking, for the sign-in throttle: the peer's address, or the X-Forwarded-For
    of a trusted proxy as uvicorn put it in the scope."""
    client = connection.scope.get("client")
    return str(client[0]) if client else "unknown"


def is_secure(connection: Connection) -> bool:
    """Whether the browser reached us over HTTPS (directly, or as uvicorn's trusted proxy
    headers say), so the session cookie is marked Secure."""
    return connection.url.scheme == "https"


@dataclass(frozen=True)
class Refusal:
    """Why a request is not served, and how to say it."""

    status: int
    reason: str


class SecurityMiddleware(ASGIMiddleware):
    """Host, token, cross-site and read-only checks, and the security headers. ``sign_ins``
    checks tokens and sessions (None: the server has no token)."""

    scopes = (ScopeType.HTTP,)

    def __init__(self, config: UiConfig, sign_ins: SignIns | None = None) -> None:
        self.config = config
        self.sign_ins = sign_ins

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        send = _with_security_headers(send)
        connection: Connection = ASGIConnection(scope)
        path = connection.url.path
        if path.startswith(STATIC_PREFIX):
            await next_app(scope, receive, send)
            return
        refusal = self._host_refusal(connection)
        credential: Credential | None = None
        if refusal is None and self.sign_ins is not None and path not in _OPEN_PATHS:
            credential, retry_after = self._credential(connection, self.sign_ins)
            if retry_after > 0:
                await throttled(connection, retry_after)(scope, receive, send)
                return
            if credential is None:
                await _unauthorized(connection)(scope, receive, send)
                return
        if refusal is None and scope.get("method", "GET") not in _SAFE_METHODS:
            refusal = self._post_refusal(connection, path, credential)
        if refusal is not None:
            await _refused(connection, refusal)(scope, receive, send)
            return
        await next_app(scope, receive, send)

    def _host_refusal(self, connection: Connection) -> Refusal | None:
        if self.config.token is not None:
            return None  # the token protects; a proxy may name us anything
        host = urlsplit("//" + connection.headers.get("host", "")).hostname or ""
        if host.lower() in self.config.hosts:
            return None
        return Refusal(
            400,
            f"this admin UI does not answer to the host name {host!r}: reach it by "
            "127.0.0.1 or localhost, or set TASKQ_ADMIN_URL to the address users reach it at",
        )

    @staticmethod
    def _credential(connection: Connection, sign_ins: SignIns) -> tuple[Credential | None, float]:
        """How the request proved it knows the token (None: it did not), and how long its
        client is locked out for failing too often (0: it is not)."""
        header = connection.headers.get("authorization")
        if header is not None:
            scheme, _, given = header.partition(" ")
            if scheme.lower() != "bearer":
                return None, 0.0
            check = sign_ins.check(client_address(connection), given.strip(), "bearer")
            # A wrong header is not rescued by a cookie.
            return ("bearer" if check.ok else None), check.retry_after
        cookie = connection.cookies.get(SESSION_COOKIE)
        if cookie and sign_ins.sessions.valid(cookie):
            return "cookie", 0.0
        return None, 0.0

    def _post_refusal(
        self,
        connection: Connection,
        path: str,
        credential: Credential | None,
    ) -> Refusal | None:
        if credential != "bearer":
            cross_site = self._cross_site(connection)
            if cross_site is not None:
                return Refusal(403, cross_site)
        if self.config.read_only and path not in _OPEN_PATHS:
            return Refusal(403, "this admin UI is read-only (taskq ui serve --read-only)")
        return None

    def _cross_site(self, connection: Connection) -> str | None:
        """Why a browser's POST is not from our own pages (None: it is, or no browser)."""
        site = connection.headers.get("sec-fetch-site")
        if site is not None:
            return None if site == "same-origin" else f"refused a {site} request"
        origin = connection.headers.get("origin")
        if origin is None:
            return None  # no browser sent this
        origin = origin.lower()
        own_host = connection.headers.get("host", "").lower()
        if urlsplit(origin).netloc == own_host or origin == self.config.public_origin:
            return None
        return f"refused a request from {origin}"


def _with_security_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            present = {name.lower() for name, _ in message.get("headers", [])}
            extra = [(k, v) for k, v in SECURITY_HEADERS if k not in present]
            message["headers"] = [*message.get("headers", []), *extra]
        await send(message)

    return wrapped


def _wants_fragment(connection: Connection) -> bool:
    return connection.headers.get("hx-request") == "true"


def _unauthorized(connection: Connection) -> ASGIApp:
    path = connection.url.path
    if is_api(path):
        return ASGIResponse(
            body=b'{"status_code":401,"detail":"this admin UI needs its token: send '
            b'Authorization: Bearer <TASKQ_ADMIN_TOKEN>"}',
            status_code=401,
            media_type="application/json",
            headers={"www-authenticate": 'Bearer realm="taskq"'},
        )
    if _wants_fragment(connection):
        # htmx follows HX-Redirect: the whole page goes to the login form.
        current = urlsplit(connection.headers.get("hx-current-url", "/"))
        back = current.path + (f"?{current.query}" if current.query else "")
        return ASGIResponse(
            body=b"sign in again",
            status_code=401,
            media_type="text/plain",
            headers={"hx-redirect": login_url(back)},
        )
    query = connection.url.query
    back = path + (f"?{query}" if query else "")
    if connection.scope.get("method") not in _SAFE_METHODS:
        back = "/"
    return ASGIRedirectResponse(path=login_url(back), status_code=303)


def throttled(connection: Connection, retry_after: float) -> ASGIApp:
    """429 for a client locked out after too many wrong tokens."""
    seconds = max(1, math.ceil(retry_after))
    reason = f"too many wrong tokens from your address: try again in {seconds} s"
    headers = {"retry-after": str(seconds)}
    if is_api(connection.url.path):
        body = json.dumps({"status_code": 429, "detail": reason})
        return ASGIResponse(
            body=body.encode(), status_code=429, media_type="application/json", headers=headers
        )
    return ASGIResponse(
        body=reason.encode(), status_code=429, media_type="text/plain", headers=headers
    )


def _refused(connection: Connection, refusal: Refusal) -> ASGIApp:
    if is_api(connection.url.path):
        body = json.dumps({"status_code": refusal.status, "detail": refusal.reason})
        return ASGIResponse(
            body=body.encode(), status_code=refusal.status, media_type="application/json"
        )
    return ASGIResponse(
        body=refusal.reason.encode(), status_code=refusal.status, media_type="text/plain"
    )
