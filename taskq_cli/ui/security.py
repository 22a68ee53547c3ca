"""Who may use the admin UI, and how a browser is kept from being used against it.

One middleware sees every request before its handler:

- **Host.** Without a token the server answers only the Host names it is reached by
  (loopback, the bind address, TASKQ_ADMIN_URL's host): a page elsewhere that points its own
  name at 127.0.0.1 (DNS rebinding) gets 400 instead of our data.
- **Token.** With TASKQ_ADMIN_TOKEN every request but ``/static`` and the login form
  carries it: ``Authorization: Bearer <token>`` (API clients, scrapers), or the session
  cookie the login form sets. The cookie holds an expiry and an HMAC of it keyed by the
  token, never the token itself; it is HttpOnly and SameSite=Strict, and changing the token
  ends every session. Tokens and MACs are compared in constant time. A page without it is
  sent to ``/login``; ``/api`` and ``/metrics`` answer 401 JSON.
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

import hashlib
import hmac
import json
import time
from dataclasses import dataclass
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

SESSION_COOKIE = "taskq_admin_session"
LOGIN_PATH = "/login"
LOGOUT_PATH = "/logout"
STATIC_PREFIX = "/static/"
# Reachable without a token: the form that asks for it, and the way out.
_OPEN_PATHS = frozenset({LOGIN_PATH, LOGOUT_PATH})
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SESSION_CONTEXT = b"taskq admin session:"

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


def token_matches(expected: str, given: str) -> bool:
    """Whether ``given`` is the token, in time independent of where they differ."""
    return hmac.compare_digest(expected.encode(), given.encode())


def session_value(token: str, expires: int) -> str:
    """The cookie for a session ending at ``expires`` (Unix seconds): ``<expires>.<mac>``."""
    mac = hmac.new(token.encode(), _SESSION_CONTEXT + str(expires).encode(), hashlib.sha256)
    return f"{expires}.{mac.hexdigest()}"


def session_valid(token: str, value: str, now: float) -> bool:
    """Whether ``value`` is a cookie this token made that has not expired."""
    expires, dot, _ = value.partition(".")
    if not dot or not expires.isdigit() or int(expires) <= now:
        return False
    return hmac.compare_digest(session_value(token, int(expires)).encode(), value.encode())


def session_cookie(config: UiConfig, *, secure: bool, now: float | None = None) -> Cookie:
    """A new session for a user who gave the right token."""
    assert config.token is not None, "sessions exist only with a token"
    lifetime = int(config.session_lifetime.total_seconds())
    expires = int(time.time() if now is None else now) + lifetime
    return Cookie(
        key=SESSION_COOKIE,
        value=session_value(config.token, expires),
        max_age=lifetime,
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
    """Host, token, cross-site and read-only checks, and the security headers."""

    scopes = (ScopeType.HTTP,)

    def __init__(self, config: UiConfig) -> None:
        self.config = config

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        send = _with_security_headers(send)
        connection: Connection = ASGIConnection(scope)
        path = connection.url.path
        if path.startswith(STATIC_PREFIX):
            await next_app(scope, receive, send)
            return
        refusal = self._host_refusal(connection)
        credential: Credential | None = None
        if refusal is None and self.config.token is not None and path not in _OPEN_PATHS:
            credential = self._credential(connection)
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

    def _credential(self, connection: Connection) -> Credential | None:
        """How the request proved it knows the token (None: it did not)."""
        token = self.config.token
        assert token is not None
        header = connection.headers.get("authorization")
        if header is not None:
            scheme, _, given = header.partition(" ")
            ok = scheme.lower() == "bearer" and token_matches(token, given.strip())
            return "bearer" if ok else None  # a wrong header is not rescued by a cookie
        cookie = connection.cookies.get(SESSION_COOKIE)
        if cookie and session_valid(token, cookie, time.time()):
            return "cookie"
        return None

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


def _refused(connection: Connection, refusal: Refusal) -> ASGIApp:
    if is_api(connection.url.path):
        body = json.dumps({"status_code": refusal.status, "detail": refusal.reason})
        return ASGIResponse(
            body=body.encode(), status_code=refusal.status, media_type="application/json"
        )
    return ASGIResponse(
        body=refusal.reason.encode(), status_code=refusal.status, media_type="text/plain"
    )
