"""``/login``: the form that takes the token and opens a session (its cookie); ``/logout``
ends the session on the server. Without a token both just go to the overview. A client
that gave too many wrong tokens gets the form back with 429 until its lockout ends
(sign_ins.py)."""

from __future__ import annotations

import math
from typing import Any

from litestar import Request, get, post
from litestar.params import FromQuery, URLEncodedBody
from litestar.response import Redirect, Template
from pydantic import BaseModel

from taskq_cli.ui.config import UiDependency
from taskq_cli.ui.security import (
    LOGIN_PATH,
    client_address,
    expired_cookie,
    is_secure,
    safe_next,
    session_cookie,
)
from taskq_cli.ui.sessions import SESSION_COOKIE


class LoginForm(BaseModel):
    """What the form posts: the token, and where the user was going."""

    token: str = ""
    next: str = "/"


def _form(
    next_path: str,
    error: str | None = None,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> Template:
    return Template(
        template_name="login.html",
        context={"page": "login", "next": safe_next(next_path), "error": error},
        status_code=status,
        headers=headers,
    )


@get(LOGIN_PATH, include_in_schema=False)
async def login_page(ui: UiDependency, next: FromQuery[str] = "/") -> Template | Redirect:
    """The token form (none needed: straight on)."""
    if ui.config.token is None:
        return Redirect(path=safe_next(next), status_code=303)
    return _form(next)


@post(LOGIN_PATH, include_in_schema=False)
async def login(
    ui: UiDependency,
    request: Request[Any, Any, Any],
    data: URLEncodedBody[LoginForm],
) -> Template | Redirect:
    """The right token: a new session and on to where the user was going. A wrong one:
    the form again, 401; too many wrong ones from this address: 429 until the lockout ends
    (the token is not even compared)."""
    sign_ins = ui.sign_ins
    destination = safe_next(data.next)
    if sign_ins is None:
        return Redirect(path=destination, status_code=303)
    check = sign_ins.check(client_address(request), data.token.strip(), "form")
    if check.retry_after > 0:
        seconds = max(1, math.ceil(check.retry_after))
        message = f"Too many wrong tokens from your address: try again in {seconds} s."
        return _form(destination, message, 429, {"retry-after": str(seconds)})
    if not check.ok:
        return _form(destination, "That is not this server's token.", 401)
    session = sign_ins.sessions.open()
    cookie = session_cookie(session, ui.config.session_lifetime, secure=is_secure(request))
    return Redirect(path=destination, status_code=303, cookies=[cookie])


@post("/logout", include_in_schema=False)
async def logout(ui: UiDependency, request: Request[Any, Any, Any]) -> Redirect:
    """End the session on the server and forget its cookie: a copy of it no longer works."""
    target = LOGIN_PATH if ui.sign_ins is not None else "/"
    cookie = request.cookies.get(SESSION_COOKIE)
    if ui.sign_ins is not None and cookie:
        ui.sign_ins.sessions.close(cookie)
    return Redirect(
        path=target, status_code=303, cookies=[expired_cookie(secure=is_secure(request))]
    )


HANDLERS = [login_page, login, logout]
