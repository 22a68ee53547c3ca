"""`taskq jobs explain` names the rate limit that holds a job back (PostgreSQL, the real CLI)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import pytest

from tests.cli.conftest import Db
from tests.conftest import CliResult

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]


def test_explain_names_the_limit_that_holds_a_job(cli: Cli, db: Db) -> None:
    db.register_actor("charge")
    worker = db.register_worker(["default"], ["charge"])
    job = db.enqueue("charge")
    [claimed] = db.claim(worker)
    outcome = db.call(
        lambda b: b.mark_retry_after(
            claimed.lease(),
            timedelta(minutes=2),
            consume_budget=False,
            reason="rate_limit:payments",
        )
    )
    assert outcome == "scheduled"
    explained = cli("jobs", "explain", str(job.id))
    assert explained.exit_code == 0, explained.stderr
    lines = explained.stdout.splitlines()
    assert lines[1].startswith("blocked: rate limit 'payments' holds it back: a worker claimed it")
    assert "without using an attempt" in lines[1]
    assert any(line.split()[:2] == ["BLOCKS", "rate_limited"] for line in lines)
    as_json = json.loads(cli("jobs", "explain", str(job.id), "--json").stdout)
    assert as_json["verdict"]["code"] == "rate_limited"
    assert as_json["verdict"]["facts"]["limit"] == "payments"
