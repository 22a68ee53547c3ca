"""A page read that fails because the database is away answers with a banner, not a 500.

``CONNECTION_ERRORS`` (what the read model raises when the database cannot be reached) turn
into 503: JSON under ``/api``, one line of text for htmx (the page keeps what it showed and
puts the line in its banner until a refresh succeeds), and a page with the banner for a
browser that asked for a whole page (it reloads itself until the database is back).
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response
from litestar.response import Template
from litestar.types import ExceptionHandler

from taskq_cli.dashboard.failures import CONNECTION_ERRORS, describe_failure
from taskq_cli.ui.config import Ui
from taskq_cli.ui.render import is_htmx
from taskq_cli.ui.security import is_api


def outage_message(error: BaseException, timeout: float) -> str:
    """``database unreachable: <what failed> (retrying)``."""
    _, reason = describe_failure(error, timeout)
    return f"database unreachable: {reason} (retrying)"


def outage_response(request: Request[Any, Any, Any], error: Exception) -> Response[Any]:
    """The 503 for a request whose read failed for want of the database."""
    ui: Ui = request.app.state.ui
    message = outage_message(error, ui.config.read_timeout)
    if is_api(request.url.path):
        return Response({"status_code": 503, "detail": message}, status_code=503)
    if is_htmx(request):
        return Response(message, status_code=503, media_type="text/plain")
    return Template(
        template_name="unavailable.html",
        context={"banner": message, "page": None},
        status_code=503,
    )


# TimeoutError: a read past UiConfig.read_timeout.
HANDLERS: dict[int | type[Exception], ExceptionHandler[Exception]] = {
    error: outage_response
    for error in (*CONNECTION_ERRORS, TimeoutError)
    if issubclass(error, Exception)
}
