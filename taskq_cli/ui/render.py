"""How a page answers: the whole page, or only its live part for htmx, and how an action
answers a browser (the refreshed live part for htmx, a redirect back for a plain form)."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response
from litestar.response import Redirect, Template

# ``?part=live``: what a page's live region polls.
LIVE = "live"


def page(name: str, part: str | None, **context: Any) -> Template:
    """``<name>.html`` (the page, which includes its live part) or ``<name>_live.html``
    (with the replica's staleness note swapped into the header beside it)."""
    if part == LIVE:
        live = {"page": name, "live_template": f"{name}_live.html", **context}
        return Template(template_name="live_part.html", context=live)
    return Template(template_name=f"{name}.html", context={"page": name, **context})


def missing(
    listing: str, noun: str, status: int, message: str, part: str | None
) -> Template | Response[str]:
    """The 400/404 answer for one object's page: a page saying so, with a link back to
    ``listing``, or only the message for its live part."""
    if part == LIVE:
        return Response(message, status_code=status, media_type="text/plain")
    heading = f"No such {noun}" if status == 404 else f"Not a {noun} id"
    context = {"page": listing, "heading": heading, "message": message}
    template = Template(template_name="missing.html", context=context)
    template.status_code = status
    return template


def is_htmx(request: Request[Any, Any, Any]) -> bool:
    """Whether htmx sent the request (it then swaps the answer into the page)."""
    return request.headers.get("hx-request") == "true"


def back_to(path: str) -> Redirect:
    """After a plain form's POST: see the page again (POST, redirect, GET)."""
    return Redirect(path=path, status_code=303)
