"""Bad requests answer 400, not 500 (issue 33): a Host header whose port is not a port,
and JSON nested 1,000 deep, were server errors before any check ran.

The app runs in-process over the test's schema, with and without a token; a real
``taskq ui serve`` takes the same Host headers off the wire.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from taskq_cli.ui.config import UiConfig
from tests.conftest import PgTarget
from tests.ui.conftest import TOKEN, StartUi
from tests.ui.inprocess import open_ui

pytestmark = [pytest.mark.postgres]

BEARER = {"authorization": f"Bearer {TOKEN}"}
BAD_HOSTS = ["x:abc", "localhost:99999", "127.0.0.1:abc", "[::1]:x", "a/b", "x:-1", "x y"]
PATHS = ["/api/overview", "/queues", "/login", "/no/such/page"]


@pytest.mark.parametrize("token", [None, TOKEN], ids=["no-token", "token"])
async def test_a_host_header_that_is_not_a_host_is_400(pg: PgTarget, token: str | None) -> None:
    async with open_ui(pg, UiConfig(token=token)) as ui:
        for host in BAD_HOSTS:
            for path in PATHS:
                response = await ui.client.get(path, headers={"host": host, **BEARER})
                assert response.status_code == 400, (host, path, response.text)
                assert "Host header" in response.text
                assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        api = await ui.client.get("/api/overview", headers={"host": "x:abc", **BEARER})
        assert api.json()["status_code"] == 400
        for host in ("127.0.0.1:8080", "localhost", "[::1]:8080", "localhost:"):
            response = await ui.client.get("/api/overview", headers={"host": host, **BEARER})
            assert response.status_code == 200, host


async def test_a_real_server_answers_a_bad_host_port_with_400(start_ui: StartUi) -> None:
    server = start_ui(token=TOKEN)
    server.wait_ready()
    for host in ("x:abc", "localhost:99999"):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            f"GET /api/overview HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
        )
        answer = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert "Traceback" not in server.output()


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "body",
    [_nested(1000), json.dumps({"reason": "x"})[:-1] + ", " + '"n": ' + _nested(1000) + "}"],
    ids=["top-level", "inside-an-object"],
)
async def test_json_nested_too_deep_is_400(pg: PgTarget, body: str) -> None:
    async with open_ui(pg, UiConfig(token=TOKEN)) as ui:
        await ui.backend.update_queue("emails", paused=False)
        response = await ui.client.post(
            "/api/queues/emails/pause",
            content=body,
            headers={**BEARER, "content-type": "application/json"},
        )
        assert response.status_code == 400, response.text
        assert "nests" in response.json()["detail"]
        row = await ui.backend.get_queue("emails")
        assert row is not None and not row.paused
        fine = await ui.client.post(
            "/api/queues/emails/pause", json={"reason": "deploy"}, headers=BEARER
        )
        assert fine.status_code == 200, fine.text
