"""The OpenAPI document at /api/openapi.json: the JSON twins, the bearer scheme when there is
a token, and the answers no handler gives itself.

The security middleware answers 401 (no token) and 403 (read-only, a cross-site browser
request) before a handler runs, and the outage handler answers 503 instead of it; the
handlers cannot declare those, so ``document_refusals`` adds them to every /api operation
of one app (Litestar copies handlers per app: the modules' objects stay as they are).
"""

from __future__ import annotations

from litestar import Litestar
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme
from litestar.routes import HTTPRoute
from pydantic import BaseModel

from taskq_cli.ui.config import UiConfig
from taskq_cli.ui.security import is_api

TITLE = "TaskQ admin"


class ErrorBody(BaseModel):
    """Why a request was not answered: the status again, and one line."""

    status_code: int
    detail: str


def openapi_config(config: UiConfig) -> OpenAPIConfig:
    """The document (no documentation site: it would load scripts from elsewhere, which
    the pages' Content-Security-Policy refuses)."""
    if config.token is None:
        return OpenAPIConfig(
            title=TITLE, version="1", path="/api", render_plugins=[JsonRenderPlugin()]
        )
    return OpenAPIConfig(
        title=TITLE,
        version="1",
        path="/api",
        render_plugins=[JsonRenderPlugin()],
        components=Components(
            security_schemes={"token": SecurityScheme(type="http", scheme="bearer")}
        ),
        security=[{"token": []}],
    )


def document_refusals(app: Litestar, config: UiConfig) -> None:
    """Declare 503 (and 401 with a token; 403 for POSTs) on every /api operation."""
    every: dict[int, ResponseSpec] = {
        503: ResponseSpec(ErrorBody, description="The database is unreachable (or too slow)."),
    }
    if config.token is not None:
        every[401] = ResponseSpec(
            ErrorBody, description="No token, or a wrong one: send Authorization: Bearer."
        )
    posts = {
        403: ResponseSpec(
            ErrorBody, description="A read-only server, or a browser's request from elsewhere."
        )
    }
    for route in app.routes:
        if not isinstance(route, HTTPRoute) or not is_api(route.path):
            continue
        for handler in route.route_handlers:
            extra = {**every, **(posts if "POST" in handler.http_methods else {})}
            handler.responses = {**extra, **(handler.responses or {})}
