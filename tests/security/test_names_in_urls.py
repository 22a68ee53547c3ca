"""Names are safe in URLs (issue 33): a queue named ``reports/../../api/queues/okq`` once
made a Resume button that resumed the queue ``okq``.

Every path segment the UI writes is encoded whole, so a stored name of any shape reaches
its own queue: a click in a real browser, the pause page, the API. New queue and schedule
names are held to a documented character set wherever one is made (the client, ``@cron``,
the CLI), while queues stored under other names keep working.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from playwright.async_api import Page, expect

from taskq_core.actors import actor
from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.client import JobsClient
from taskq_core.cron_schedules import cron
from taskq_core.errors import ConfigError
from taskq_core.statemachine import JobStatus
from tests.cli.conftest import one_error_line
from tests.conftest import CliResult, PgTarget
from tests.ui.inprocess import SAME_ORIGIN, open_ui
from tests.ui.server import UiServer
from tests.ui.states import job_in

CRAFTED = "reports/../../api/queues/okq"
ENCODED = "reports%2F..%2F..%2Fapi%2Fqueues%2Fokq"
# Names an application might have stored before the character set: each is still addressed.
LEGACY = [CRAFTED, "tenant 42/reports", "100%", "émails?x=1#top", "a\\b"]

Cli = Callable[..., CliResult]


async def _paused(backend: PostgresBackend, name: str) -> bool:
    row = await backend.get_queue(name)
    assert row is not None, name
    return row.paused


async def _two_paused_queues(backend: PostgresBackend, crafted: str = CRAFTED) -> None:
    """The crafted queue and the one its name points at, both paused, with a job each."""
    for name in (crafted, "okq"):
        await job_in(backend, JobStatus.PENDING, queue=name)
        await backend.update_queue(name, paused=True)


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.postgres
@pytest.mark.slow
async def test_resume_on_a_crafted_name_resumes_that_queue_in_a_browser(
    page: Page, ui_server: UiServer, ui_backend: PostgresBackend
) -> None:
    await _two_paused_queues(ui_backend)
    await page.goto(ui_server.url + "/queues")
    row = page.locator(f'tr[data-queue="{CRAFTED}"]')
    await expect(row).to_contain_text("paused")
    form = row.locator("form")
    assert await form.get_attribute("action") == f"/queues/{ENCODED}/resume"
    assert await form.get_attribute("hx-post") == f"/queues/{ENCODED}/resume"

    await row.get_by_role("button", name="Resume").click()
    await expect(row).to_contain_text("active")
    assert not await _paused(ui_backend, CRAFTED)
    assert await _paused(ui_backend, "okq"), "the click resumed the queue the name points at"
    await expect(page.locator('tr[data-queue="okq"]')).to_contain_text("paused")


@pytest.mark.postgres
@pytest.mark.parametrize("name", LEGACY)
async def test_a_stored_name_of_any_shape_is_addressed_whole(pg: PgTarget, name: str) -> None:
    async with open_ui(pg) as ui:
        await _two_paused_queues(ui.backend, name)
        encoded = quote(name, safe="")  # nothing left safe: '/' too
        html = (await ui.client.get("/queues")).text
        assert f'action="/queues/{encoded}/resume"' in html

        resumed = await ui.client.post(f"/api/queues/{encoded}/resume")
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["name"] == name
        assert not await _paused(ui.backend, name)
        assert await _paused(ui.backend, "okq")

        html = (await ui.client.get("/queues")).text
        assert f'href="/queues/{encoded}/pause"' in html
        form = await ui.client.get(f"/queues/{encoded}/pause")
        assert form.status_code == 200, form.text
        assert f'action="/queues/{encoded}/pause"' in form.text

        paused = await ui.client.post(
            f"/queues/{encoded}/pause", data={"reason": "by hand"}, headers=SAME_ORIGIN
        )
        assert paused.status_code == 303
        assert await _paused(ui.backend, name)


@pytest.mark.postgres
async def test_an_unknown_name_is_404_and_one_no_queue_can_have_is_400(pg: PgTarget) -> None:
    async with open_ui(pg) as ui:
        assert (await ui.client.post("/api/queues/nosuch/resume")).status_code == 404
        refused = await ui.client.post(f"/api/queues/{ENCODED}/resume")
        assert refused.status_code == 400
        assert "is not a queue name" in refused.json()["detail"]


# --- names are checked where they are made ------------------------------------------------

BAD_NAMES = [CRAFTED, "a b", "", ".", "..", "-x", "q\x1b[2J", "<b>x</b>", "x" * 201]


@pytest.mark.parametrize("name", BAD_NAMES)
async def test_the_client_refuses_a_bad_queue_name(name: str) -> None:
    backend = InMemoryBackend()
    async with JobsClient(backend=backend) as client:
        with pytest.raises(ConfigError, match="not a valid queue name"):
            await client.enqueue("ping", {}, queue=name)
        with pytest.raises(ConfigError, match="not a valid queue name"):
            await client.create_schedule("hourly", "ping", "0 * * * *", queue=name)
        with pytest.raises(ConfigError, match="not a valid schedule name"):
            await client.create_schedule(name, "ping", "0 * * * *")
    assert await backend.list_queues() == []


def test_an_actor_on_a_bad_queue_cannot_enqueue_and_cron_refuses_a_bad_name() -> None:
    @actor(queue=CRAFTED)
    async def report(payload: dict[str, Any]) -> None:
        """An actor declared on a queue no name check let through."""

    with pytest.raises(ConfigError, match="not a valid schedule name"):
        cron("0 * * * *", name="nightly report")(report)
    with pytest.raises(ConfigError, match="not a valid queue name"):
        cron("0 * * * *", name="nightly", queue="a/b")(report)


async def test_enqueueing_for_an_actor_on_a_bad_queue_is_refused() -> None:
    @actor(queue=CRAFTED)
    async def report(payload: dict[str, Any]) -> None:
        """An actor declared on a queue no name check let through."""

    async with JobsClient(backend=InMemoryBackend()) as client:
        with pytest.raises(ConfigError, match="actor 'report''s queue: "):
            await client.enqueue(report, {})


@pytest.mark.parametrize("name", ["emails", "tenant-42.reports:eu", "_internal", "A1"])
async def test_good_names_are_taken(name: str) -> None:
    async with JobsClient(backend=InMemoryBackend()) as client:
        job = await client.enqueue("ping", {}, queue=name)
        assert job.queue == name
        schedule = await client.create_schedule(name, "ping", "0 * * * *", queue=name)
        assert schedule.name == name


@pytest.mark.postgres
@pytest.mark.parametrize(
    "args",
    [
        ["enqueue", "ping", "--queue", CRAFTED],
        ["queues", "pause", "new queue", "--create"],
        ["schedules", "add", "nightly/report", "ping", "0 3 * * *"],
        ["schedules", "add", "nightly", "ping", "0 3 * * *", "--queue", "a/b"],
    ],
    ids=["enqueue", "queues-create", "schedule-name", "schedule-queue"],
)
def test_the_cli_refuses_a_bad_name(taskq_cli: Cli, pg: PgTarget, args: list[str]) -> None:
    line = one_error_line(taskq_cli(*args, env=pg.env()))
    assert "is not a valid" in line and "ASCII letters, digits" in line


@pytest.mark.postgres
def test_jobs_move_refuses_a_bad_target(taskq_cli: Cli, pg: PgTarget) -> None:
    created = taskq_cli("enqueue", "ping", env=pg.env())
    assert created.exit_code == 0, created.stderr
    job_id = created.stdout.strip()
    line = one_error_line(taskq_cli("jobs", "move", job_id, "--to", CRAFTED, env=pg.env()))
    assert "--to" in line and "is not a valid queue name" in line


async def _seed_legacy(pg: PgTarget) -> None:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2)
    try:
        await job_in(backend, JobStatus.PENDING, queue=CRAFTED)
    finally:
        await backend.close()


async def _legacy_paused(pg: PgTarget) -> bool:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=2)
    try:
        return await _paused(backend, CRAFTED)
    finally:
        await backend.close()


@pytest.mark.postgres
def test_a_stored_queue_of_another_shape_keeps_working_from_the_cli(
    taskq_cli: Cli, pg: PgTarget
) -> None:
    asyncio.run(_seed_legacy(pg))
    listed = taskq_cli("queues", "list", "--json", env=pg.env())
    assert listed.exit_code == 0 and CRAFTED in listed.stdout, listed.stderr
    paused = taskq_cli("queues", "pause", CRAFTED, "--reason", "legacy", env=pg.env())
    assert paused.exit_code == 0, paused.stderr
    assert asyncio.run(_legacy_paused(pg))
