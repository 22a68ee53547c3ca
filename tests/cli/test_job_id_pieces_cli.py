"""Naming a job by a piece of its id: every command that takes an id accepts a unique prefix
or suffix (as tables and ``taskq top`` show them), refuses an ambiguous one with how many
jobs match, and reports an unknown one like an unknown id."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

import pytest

from taskq_core.statemachine import JobStatus
from tests.cli.conftest import Db, one_error_line, parse_json
from tests.conftest import CliResult

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]

# Two ids sharing their first 16 hex digits; suffixes differ.
TWIN_A = UUID("0196a3b2-7c4d-7e00-8000-0000000aaaaa")
TWIN_B = UUID("0196a3b2-7c4d-7e00-8000-0000000bbbbb")


def twins(db: Db) -> None:
    db.enqueue(job_id=TWIN_A)
    db.enqueue(job_id=TWIN_B)


def test_show_and_explain_take_a_prefix_or_a_suffix(cli: Cli, db: Db) -> None:
    job = db.enqueue()
    for piece in (job.id.hex[:10], str(job.id)[:13], job.id.hex[-12:], job.id.hex[-12:].upper()):
        shown = parse_json(cli("jobs", "show", piece, "--json"))
        assert shown["job"]["id"] == str(job.id), piece
        explained = parse_json(cli("jobs", "explain", piece, "--json"))
        assert explained["job_id"] == str(job.id), piece


def test_cancel_and_retry_act_on_the_job_a_piece_names(cli: Cli, db: Db) -> None:
    twins(db)
    result = cli("cancel", "0000000aaaaa")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"cancelled {TWIN_A}"
    assert db.get(TWIN_A).status is JobStatus.CANCELLED
    assert db.get(TWIN_B).status is JobStatus.PENDING
    retried = cli("retry", TWIN_A.hex[-5:])
    assert retried.exit_code == 0, retried.stderr
    assert retried.stdout.strip() == f"re-pended {TWIN_A}"
    assert db.get(TWIN_A).status is JobStatus.PENDING


def test_an_ambiguous_piece_changes_nothing_and_says_how_many_match(cli: Cli, db: Db) -> None:
    twins(db)
    for command in (["cancel"], ["retry"], ["jobs", "show"], ["jobs", "explain"]):
        line = one_error_line(cli(*command, "0196a3b2"))
        assert "ambiguous: 2 jobs match" in line, line
        assert str(TWIN_A) in line and str(TWIN_B) in line
    assert {j.status for j in db.jobs()} == {JobStatus.PENDING}


def test_a_piece_matching_nothing_is_an_unknown_job(cli: Cli, db: Db) -> None:
    twins(db)
    for command in (["cancel"], ["retry"], ["jobs", "show"], ["jobs", "explain"]):
        line = one_error_line(cli(*command, "123abc"))
        assert "no job id starts or ends with '123abc'" in line, line
        assert "is not a job id" in one_error_line(cli(*command, "not-hex!"))


def test_an_archived_job_is_found_by_its_suffix(cli: Cli, db: Db) -> None:
    job = db.succeeded_job()
    db.archive(job)
    shown = parse_json(cli("jobs", "show", job.id.hex[-12:], "--json"))
    assert shown["job"]["id"] == str(job.id)
    assert shown["archived"]["events_deleted"] is True
