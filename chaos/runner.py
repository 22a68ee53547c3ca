"""Runs scenarios one after another on one private PostgreSQL, each on a fresh schema."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from chaos.actors import has_transactional_connection
from chaos.harness import Harness, ScenarioResult
from chaos.pgserver import PrivateServer
from chaos.scenarios import SCENARIOS, Scenario

# Upper bounds on one scenario's whole run (its own waits are bounded well inside these).
BUDGET_SHORT = 180.0
BUDGET_FULL = 600.0
NO_CONNECTION = (
    "skipped: JobContext has no connection() yet (transactional completion, issue 14 item 8)"
)


def start_server() -> PrivateServer:
    """A tuned private PostgreSQL in a short /tmp path (its Unix socket path is bounded)."""
    server = PrivateServer(Path(tempfile.mkdtemp(prefix="chaos-pg-")))
    try:
        server.start()
        server.tune_for_tests()
    except BaseException:
        server.close()
        raise
    return server


async def run_scenario(
    server: PrivateServer, scenario: Scenario, *, short: bool, directory: Path
) -> ScenarioResult:
    """Run one scenario to its verdict; never raises for a failure of the system under test."""
    result = ScenarioResult(scenario.name)
    if scenario.needs_connection and not has_transactional_connection():
        result.skipped = NO_CONNECTION
        return result
    if not server.running():  # an earlier scenario may have left it down
        await asyncio.to_thread(server.start)
    started = time.monotonic()
    schema = "chaos_" + scenario.name.replace("-", "_")
    harness = Harness(server, schema, directory / scenario.name, result)
    budget = BUDGET_SHORT if short else BUDGET_FULL
    try:
        await harness.open()
        await asyncio.wait_for(scenario.run(harness, short), budget)
    except TimeoutError:
        harness.check("scenario ends within its budget", False, f"over {budget:g}s")
    except Exception as exc:  # a runner bug or an unreachable database: report, go on
        harness.check("scenario runs to its end", False, f"{type(exc).__name__}: {exc}")
    finally:
        try:
            await harness.keep_evidence()
        finally:
            await harness.close()
        result.elapsed = time.monotonic() - started
    return result


async def run_all(
    names: Iterable[str],
    *,
    short: bool,
    directory: Path,
    on_result: Callable[[ScenarioResult], None] = lambda _: None,
) -> list[ScenarioResult]:
    """Run the named scenarios in order on one private server; stop it afterwards."""
    server = await asyncio.to_thread(start_server)
    results: list[ScenarioResult] = []
    try:
        for name in names:
            result = await run_scenario(server, SCENARIOS[name], short=short, directory=directory)
            results.append(result)
            on_result(result)
    finally:
        await asyncio.to_thread(server.close)
    return results


def keep_or_remove(directory: Path, results: list[ScenarioResult], keep: bool) -> bool:
    """Unless asked to keep everything, remove the logs of every scenario that passed (or was
    skipped), and the directory itself when nothing failed; whether any logs remain."""
    if keep:
        return True
    for result in results:
        if result.passed or result.skipped:
            shutil.rmtree(directory / result.name, ignore_errors=True)
    if all(r.passed or r.skipped for r in results):
        shutil.rmtree(directory, ignore_errors=True)
        return False
    return True
