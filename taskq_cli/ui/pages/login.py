"""``/login``: the form that takes the token and sets the session cookie; ``/logout``
ends the session. Without a token both just go to the overview."""

from __future__ import annotations

from typing import Any

from litestar import Request, get, post
from litestar.params import FromQuery, URLEncodedBody
from litestar.response import Redirect, Template
from pydantic import BaseModel

from taskq_cli.ui.config import UiDependency
from taskq_cli.ui.security import (
    LOGIN_PATH,
    expired_cookie,
    is_secure,
    safe_next,
    session_cookie,
    token_matches,
)


class LoginForm(BaseModel):
    """What the form posts: the token, and where the user was going."""

    token: str = ""
    next: str = "/"


def _form(next_path: str, error: str | None = None, status: int = 200) -> Template:
    return Template(
        template_name="login.html",
        context={"page": "login", "next": safe_next(next_path), "error": error},
        status_code=status,
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
    """The right token: a session cookie and on to where the user was going. A wrong one:
    the form again, 401."""
    token = ui.config.token
    destination = safe_next(data.next)
    if token is None:
        return Redirect(path=destination, status_code=303)
    if not token_matches(token, data.token.strip()):
        return _form(destination, "That is not this server's token.", 401)
    cookie = session_cookie(ui.config, secure=is_secure(request))
    return Redirect(path=destination, status_code=303, cookies=[cookie])


@post("/logout", include_in_schema=False)
async def logout(ui: UiDependency, request: Request[Any, Any, Any]) -> Redirect:
    """Forget the session cookie."""
    target = LOGIN_PATH if ui.config.token is not None else "/"
    return Redirect(
        path=target, status_code=303, cookies=[expired_cookie(secure=is_secure(request))]
    )


HANDLERS = [login_page, login, logout]
