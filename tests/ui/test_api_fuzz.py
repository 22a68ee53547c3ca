"""Schemathesis over the served OpenAPI document: every operation under ``/api/``, fed
generated input (valid and invalid), against a real ``taskq ui serve`` and database, never
answers with a server error and always answers in the shape its document declares.

The run is bounded (a fixed seed and a few examples per operation) so it stays a test, not
a fuzzing campaign. The server carries a token (so the fuzzed requests pass the same check
an operator's do) on a throwaway schema seeded with jobs, so the POST actions, when the
document lists them, act on real rows.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.statemachine import JobStatus
from tests.ui.conftest import TOKEN
from tests.ui.server import UiServer
from tests.ui.states import job_in

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ST = str(Path(sys.executable).parent / "st")
EXAMPLES_PER_OPERATION = 10
SEED = 21
CHECKS = "not_a_server_error,status_code_conformance,response_schema_conformance"


@pytest.mark.timeout(300)
@pytest.mark.ui_server(token=TOKEN)
async def test_no_generated_request_gets_a_server_error(
    ui_server: UiServer, ui_backend: PostgresBackend, tmp_path: Path
) -> None:
    server = ui_server
    for status in (JobStatus.PENDING, JobStatus.FAILED, JobStatus.SUCCEEDED):
        await job_in(ui_backend, status, queue="media")
    command = [
        ST,
        "run",
        f"{server.url}/api/openapi.json",
        "--checks",
        CHECKS,
        "--max-examples",
        str(EXAMPLES_PER_OPERATION),
        "--seed",
        str(SEED),
        "--generation-database",
        "none",
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--request-timeout",
        "10",
        "--workers",
        "1",
        "--no-color",
        "--report-dir",
        str(tmp_path),
    ]
    # In tmp_path: schemathesis keeps a crash cache in its working directory.
    run = await asyncio.create_subprocess_exec(
        *command, cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    async with asyncio.timeout(280):
        out, _ = await run.communicate()
    output = out.decode(errors="replace")
    assert run.returncode == 0, output
    assert "No issues found" in output or "passed" in output, output
    assert server.alive(), server.output()
