"""Who may use the admin UI: the token (Bearer header, or the login form's session cookie),
cross-site POSTs refused, --read-only, the Host check without a token, the headers every
response carries. The app runs in-process over the test's schema; every check that an
action did or did not happen reads the database."""

from __future__ import annotations

from datetime import timedelta
from http.cookies import SimpleCookie

import httpx
import pytest

from taskq_cli.ui.config import UiConfig
from taskq_cli.ui.security import session_cookie
from taskq_cli.ui.sessions import SESSION_COOKIE, SessionStore
from taskq_core.backend.postgres.backend import PostgresBackend
from tests.conformance.states import args
from tests.conftest import PgTarget
from tests.ui.fleet_client import SAME_ORIGIN
from tests.ui.fleet_client import open_fleet_ui as open_ui

pytestmark = [pytest.mark.postgres]

TOKEN = "s3cret-token-for-the-ui-tests-4f9d2a7c"
BEARER = {"authorization": f"Bearer {TOKEN}"}


async def _queue(backend: PostgresBackend, name: str = "emails") -> None:
    """A queue the pages know (it has a job)."""
    await backend.enqueue(args(queue=name))


async def _paused(backend: PostgresBackend, name: str = "emails") -> bool:
    row = await backend.get_queue(name)
    assert row is not None
    return row.paused


async def _login(client: httpx.AsyncClient, token: str = TOKEN, next_path: str = "/") -> None:
    response = await client.post(
        "/login", data={"token": token, "next": next_path}, headers=SAME_ORIGIN
    )
    assert response.status_code == 303, response.text


def _set_cookie(response: httpx.Response) -> SimpleCookie:
    cookie: SimpleCookie = SimpleCookie()
    cookie.load(response.headers["set-cookie"])
    return cookie


async def test_with_a_token_pages_send_to_login_and_the_api_answers_401(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        page = await ui.client.get("/queues?part=live")
        assert page.status_code == 303
        assert page.headers["location"] == "/login?next=/queues%3Fpart%3Dlive"

        api = await ui.client.get("/api/queues")
        assert api.status_code == 401
        assert api.headers["www-authenticate"].startswith("Bearer")
        assert "Authorization: Bearer" in api.json()["detail"]

        wrong = await ui.client.get("/api/queues", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert (await ui.client.get("/api/openapi.json")).status_code == 401

        assert (await ui.client.get("/api/queues", headers=BEARER)).status_code == 200
        assert (await ui.client.get("/queues", headers=BEARER)).status_code == 200
        assert (await ui.client.get("/static/taskq.css")).status_code == 200  # stays open


async def test_the_login_form_sets_a_session_cookie_that_is_not_the_token(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        form = await ui.client.get("/login", params={"next": "/workers"})
        assert form.status_code == 200
        assert 'name="token"' in form.text and 'value="/workers"' in form.text

        wrong = await ui.client.post(
            "/login", data={"token": "not-it", "next": "/workers"}, headers=SAME_ORIGIN
        )
        assert wrong.status_code == 401
        assert "not this server&#39;s token" in wrong.text
        assert "set-cookie" not in wrong.headers

        right = await ui.client.post(
            "/login", data={"token": TOKEN, "next": "/workers"}, headers=SAME_ORIGIN
        )
        assert right.status_code == 303
        assert right.headers["location"] == "/workers"
        morsel = _set_cookie(right)[SESSION_COOKIE]
        assert morsel["httponly"] is True
        assert morsel["samesite"].lower() == "strict"
        assert TOKEN not in morsel.value

        assert (await ui.client.get("/workers")).status_code == 200  # the client keeps it
        assert (await ui.client.get("/api/workers")).status_code == 200

        out = await ui.client.post("/logout", headers=SAME_ORIGIN)
        assert out.status_code == 303 and out.headers["location"] == "/login"
        assert (await ui.client.get("/workers")).status_code == 303


async def test_a_forged_session_cookie_is_refused(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        for value in (
            "Jm0cS3ZtYVh2QnZ1dGhlc2VydmVybmV2ZXJvcGVuZWRpdA",  # a session never opened
            "4000000000." + "0" * 64,  # the old <expiry>.<mac> form
            TOKEN,  # the token itself is no session
        ):
            ui.client.cookies.set(SESSION_COOKIE, value)
            response = await ui.client.get("/")
            assert response.status_code == 303, value


async def test_an_htmx_poll_without_a_session_sends_the_whole_page_to_login(
    pg: PgTarget,
) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        response = await ui.client.get(
            "/queues?part=live",
            headers={"hx-request": "true", "hx-current-url": "http://127.0.0.1/queues"},
        )
        assert response.status_code == 401
        assert response.headers["hx-redirect"] == "/login?next=/queues"


@pytest.mark.parametrize(
    "next_path", ["//evil.example/x", "/\\evil.example", "https://evil.example"]
)
async def test_login_only_returns_to_this_site(pg: PgTarget, next_path: str) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        response = await ui.client.post(
            "/login", data={"token": TOKEN, "next": next_path}, headers=SAME_ORIGIN
        )
        assert response.status_code == 303
        assert response.headers["location"] == "/"


@pytest.mark.parametrize("token", [TOKEN, None], ids=["token", "no-token"])
async def test_a_cross_site_post_is_refused_and_a_same_site_one_acts(
    pg: PgTarget, token: str | None
) -> None:
    async with open_ui(pg, UiConfig(token=token)) as ui:
        await _queue(ui.backend)
        if token is not None:
            await _login(ui.client)
        for headers in (
            {"sec-fetch-site": "cross-site", "origin": "https://evil.example"},
            {"sec-fetch-site": "same-site", "origin": "https://other.127.0.0.1"},
            {"origin": "https://evil.example"},  # a browser without fetch metadata
            {"origin": "null"},  # a sandboxed frame
        ):
            refused = await ui.client.post(
                "/queues/emails/pause", data={"reason": "x"}, headers=headers
            )
            assert refused.status_code == 403, headers
            assert not await _paused(ui.backend)

        done = await ui.client.post(
            "/queues/emails/pause", data={"reason": "deploy"}, headers=SAME_ORIGIN
        )
        assert done.status_code == 303
        assert await _paused(ui.backend)


async def test_bearer_requests_need_no_browser_headers(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        await _queue(ui.backend)
        response = await ui.client.post(
            "/api/queues/emails/pause", json={"reason": "from a script"}, headers=BEARER
        )
        assert response.status_code == 200, response.text
        assert response.json()["pause"]["reason"] == "from a script"
        assert await _paused(ui.backend)


async def test_read_only_hides_the_actions_and_refuses_them(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(read_only=True)) as ui:
        await _queue(ui.backend)
        await ui.backend.update_queue("paused-one", paused=True)
        page = await ui.client.get("/queues")
        assert page.status_code == 200
        assert "emails" in page.text and "paused-one" in page.text
        assert "/pause" not in page.text and "/resume" not in page.text
        assert "read-only" in page.text

        for path in ("/queues/emails/pause", "/api/queues/emails/pause"):
            refused = await ui.client.post(path, headers=SAME_ORIGIN, data={"reason": "x"})
            assert refused.status_code == 403, path
            assert "read-only" in refused.text
        refused = await ui.client.post("/queues/paused-one/resume", headers=SAME_ORIGIN)
        assert refused.status_code == 403
        assert (await ui.client.get("/queues/emails/pause")).status_code == 403
        assert not await _paused(ui.backend)
        assert await _paused(ui.backend, "paused-one")


async def test_without_a_token_other_host_names_are_not_answered(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig()) as ui:
        rebound = await ui.client.get("/api/overview", headers={"host": "evil.example:8080"})
        assert rebound.status_code == 400
        assert "TASKQ_ADMIN_URL" in rebound.text
        for host in ("127.0.0.1:8080", "localhost:8080", "[::1]:8080"):
            response = await ui.client.get("/api/overview", headers={"host": host})
            assert response.status_code == 200, host

    config = UiConfig(public_url="https://ops.example.com")
    async with open_ui(pg, config) as ui:
        await _queue(ui.backend)
        host = {"host": "ops.example.com"}
        assert (await ui.client.get("/api/overview", headers=host)).status_code == 200
        behind_proxy = await ui.client.post(
            "/queues/emails/pause",
            data={"reason": "x"},
            headers={**host, "origin": "https://ops.example.com"},
        )
        assert behind_proxy.status_code == 303
        assert await _paused(ui.backend)


async def test_every_response_carries_the_security_headers(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        for response in (
            await ui.client.get("/", headers=BEARER),
            await ui.client.get("/login"),
            await ui.client.get("/api/overview"),  # a refusal too
        ):
            policy = response.headers["content-security-policy"]
            assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["x-content-type-options"] == "nosniff"


def test_a_session_lasts_its_lifetime() -> None:
    now = [1_000.0]
    sessions = SessionStore(timedelta(hours=1), clock=lambda: now[0])
    value = sessions.open()
    cookie = session_cookie(value, sessions.lifetime, secure=True)
    assert cookie.max_age == 3600 and cookie.secure and cookie.httponly
    now[0] = 1_000 + 3599
    assert sessions.valid(value)
    now[0] = 1_000 + 3600
    assert not sessions.valid(value)
