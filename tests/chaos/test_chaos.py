"""The chaos scenarios, short versions: real workers and supervisors, faults, a private database.

Each test runs one scenario of ``chaos`` (``python -m chaos --short --scenario NAME``) and
asserts its invariants. Checks that compare a measured time with a bound (the leader's
failover gap, exiting within the termination grace) are printed, not asserted: ``make chaos``
enforces them, where a loaded CI machine cannot make them flaky. Every wait is bounded and
waits on states (database rows, marker lines, process exits), never on a fixed sleep.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.pgserver import PrivateServer
from chaos.runner import run_scenario, start_server
from chaos.scenarios import SCENARIOS

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateServer]:
    """One private PostgreSQL for every scenario (each scenario migrates its own schema)."""
    server = start_server()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_short_scenario_keeps_its_invariants(name: str, server: PrivateServer) -> None:
    # Not under tmp_path, which pytest prunes after a few runs: the logs, markers and tables
    # of a scenario that fails an invariant stay where the failure message says.
    directory = Path(tempfile.mkdtemp(prefix=f"chaos-{name}-"))
    result = await run_scenario(server, SCENARIOS[name], short=True, directory=directory)
    if result.passed or result.skipped:
        shutil.rmtree(directory, ignore_errors=True)
    if result.skipped:
        pytest.skip(result.skipped)
    for check in result.checks:
        print(f"{'ok  ' if check.ok else 'FAIL'} {check.name}{' (timed)' if check.timed else ''}")
    print("notes:", "; ".join(result.notes))
    if result.failed_by_cause:
        print("jobs not succeeded, by cause:", "; ".join(result.failed_by_cause))
    failed = result.failures(timed=False)
    if not result.passed:
        print(f"logs kept in {directory / name}")
    assert not failed, "\n".join(
        [f"{name}: {len(failed)} invariant(s) failed (logs kept in {directory / name}):"]
        + [f"  {check.name}: {check.detail}" for check in failed]
    )
