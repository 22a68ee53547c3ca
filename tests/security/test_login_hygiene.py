"""Login hygiene of the admin UI (issue 33): wrong tokens are throttled per client and
logged without the token, signing out ends the session on the server, a short or
guessable token stops ``taskq ui serve`` at start, and every sign-in gets a cookie of its
own.

The app runs in-process over the test's schema (the throttle, the sessions), or as a real
``taskq ui serve`` where its log or its start is what is checked.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import time
from http.cookies import SimpleCookie

import httpx
import pytest

from chaos.pgbouncer import free_port
from taskq_cli.ui.config import UiConfig
from tests.conftest import TASKQ_BIN, PgTarget
from tests.ui.conftest import TOKEN, StartUi
from tests.ui.inprocess import BASE_URL, SAME_ORIGIN, open_ui

pytestmark = [pytest.mark.postgres]

WRONG = "wrong-guess-7c1e0b9a4d2f68e3a5c1"
BEARER = {"authorization": f"Bearer {TOKEN}"}
SESSION_COOKIE = "taskq_admin_session"


async def _sign_in(client: httpx.AsyncClient, token: str) -> httpx.Response:
    return await client.post("/login", data={"token": token, "next": "/"}, headers=SAME_ORIGIN)


def _cookie(response: httpx.Response) -> str:
    jar: SimpleCookie = SimpleCookie()
    jar.load(response.headers["set-cookie"])
    return jar[SESSION_COOKIE].value


async def test_wrong_tokens_lock_the_client_out_even_for_the_right_one(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        statuses = [(await _sign_in(ui.client, WRONG)).status_code for _ in range(300)]
        assert statuses[:5] == [401] * 5  # a few typos are free
        assert statuses.count(429) > 250, statuses
        right = await _sign_in(ui.client, TOKEN)
        assert right.status_code == 429, "the right token got in during a lockout"
        assert int(right.headers["retry-after"]) >= 1
        assert "set-cookie" not in right.headers
        api = await ui.client.get("/api/overview", headers=BEARER)  # a Bearer token too
        assert api.status_code == 429 and "retry-after" in api.headers

        # Another address is not locked out.
        other = httpx.ASGITransport(app=ui.app, client=("10.0.0.9", 40000))
        async with httpx.AsyncClient(transport=other, base_url=BASE_URL) as elsewhere:
            assert (await _sign_in(elsewhere, TOKEN)).status_code == 303
            assert (await elsewhere.get("/api/overview", headers=BEARER)).status_code == 200


async def test_wrong_bearer_tokens_count_too(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        wrong = {"authorization": f"Bearer {WRONG}"}
        statuses = [
            (await ui.client.get("/api/queues", headers=wrong)).status_code for _ in range(50)
        ]
        assert statuses[:5] == [401] * 5
        assert 429 in statuses
        assert (await ui.client.get("/api/queues", headers=BEARER)).status_code == 429


async def test_a_failed_sign_in_is_logged_without_the_token(start_ui: StartUi) -> None:
    server = start_ui(token=TOKEN)
    async with httpx.AsyncClient(base_url=server.url) as client:
        for _ in range(3):
            assert (await _sign_in(client, WRONG)).status_code == 401
        assert (
            await client.get("/api/overview", headers={"authorization": "Bearer x"})
        ).status_code == 401
    deadline = time.monotonic() + 30
    while server.output().count("ui_sign_in_failed") < 4 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # poll the log: the server writes each line as it answers
    lines = [line for line in server.output().splitlines() if "ui_sign_in_failed" in line]
    assert len(lines) == 4, server.output()
    assert all("127.0.0.1" in line for line in lines)
    assert sum("form" in line for line in lines) == 3 and "bearer" in lines[-1]
    assert WRONG not in server.output() and TOKEN not in server.output()


async def test_signing_out_ends_the_session_on_the_server(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        signed_in = await _sign_in(ui.client, TOKEN)
        assert signed_in.status_code == 303
        stolen = _cookie(signed_in)
        assert (await ui.client.get("/")).status_code == 200
        out = await ui.client.post("/logout", headers=SAME_ORIGIN)
        assert out.status_code == 303

        ui.client.cookies.set(SESSION_COOKIE, stolen)  # a copy kept from before
        replayed = await ui.client.get("/")
        assert replayed.status_code == 303 and replayed.headers["location"].startswith("/login")
        assert (await ui.client.get("/api/overview")).status_code == 401


async def test_every_sign_in_gets_a_cookie_of_its_own(pg: PgTarget) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        cookies = [_cookie(await _sign_in(ui.client, TOKEN)) for _ in range(5)]
        assert len(set(cookies)) == 5
        assert all(len(value) >= 40 and TOKEN not in value for value in cookies)


@pytest.mark.parametrize(
    "token",
    [
        "aaaaaaaaaaaaaaaa",
        "a" * 40,
        "0123456789abcdef" * 2,
        "passwordpasswordpasswordpassword",
        secrets.token_hex(10),  # random, but 20 characters
    ],
    ids=["16-same", "40-same", "sequence", "repeated-word", "short-random"],
)
def test_a_short_or_guessable_token_stops_the_start(pg: PgTarget, token: str) -> None:
    port = str(free_port())
    result = subprocess.run(
        [TASKQ_BIN, "ui", "serve", "--port", port],
        env=pg.env(TASKQ_ADMIN_TOKEN=token),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: TASKQ_ADMIN_TOKEN is "), lines
    assert "Traceback" not in result.stderr
    assert token not in result.stderr + result.stdout
