"""A job whose payload and result are megabytes, in a real browser (issue 33): the page shows
their first characters and sizes, stays small, and its links download the whole values."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

import pytest
from playwright.async_api import Page, expect

from taskq_cli.json_preview import PREVIEW_CHARS
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, Start
from tests.ui.server import UiServer

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.slow]

BIG = 3 * 1024 * 1024
_WRAPPING = len(json.dumps({"blob": ""}))


def blob(letter: str) -> dict[str, str]:
    """A value whose JSON text is BIG bytes."""
    return {"blob": letter * (BIG - _WRAPPING)}


async def test_a_big_payload_and_result_are_previewed_and_downloaded_whole(
    page: Page, ui_server: UiServer, tmp_path: Path
) -> None:
    target = ui_server.target
    # A raised limit (the default refuses 3 MB) lets them in.
    backend = await PostgresBackend.connect(
        target.dsn, target.schema, max_size=1, max_payload_bytes=4 * 1024 * 1024
    )
    try:
        job = await backend.enqueue(EnqueueArgs(actor="report", queue="big", payload=blob("p")))
        worker = uuid4()
        [claimed] = await backend.dispatch_batch(worker, ["big"], 1, timedelta(seconds=60))
        await backend.mark_started_many(worker, [Start(job.id, claimed.attempt)])
        assert await backend.mark_succeeded(claimed.lease(), blob("r"))
    finally:
        await backend.close()

    answer = await page.goto(f"{ui_server.url}/jobs/{job.id}")
    assert answer is not None and answer.ok
    assert len(await answer.body()) < 64 * 1024
    payload = page.locator("#payload")
    await expect(payload.locator("pre")).to_contain_text("p" * (PREVIEW_CHARS // 2))
    await expect(payload).to_contain_text(f"Download the whole payload (JSON, {BIG:,} bytes)")
    await expect(page.locator("#result")).to_contain_text(f"{BIG:,} bytes")

    for part, letter in (("payload", "p"), ("result", "r")):
        async with page.expect_download() as started:
            await page.locator(f"#{part} a[href='/jobs/{job.id}/{part}']").click()
        download = await started.value
        saved = tmp_path / f"{part}.json"
        await download.save_as(saved)
        assert json.loads(saved.read_text()) == blob(letter)
