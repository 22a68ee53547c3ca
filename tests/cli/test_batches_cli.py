"""`taskq batches list|show` and the batch line of `taskq jobs show`: what they print (table and
--json) for batches made through the backend, ids taken whole or as a unique piece, and
unknown ids and bad input refused in one line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID, uuid4

import pytest

from tests.batch_seed import SeededBatch, make_batch, settle_child
from tests.cli.conftest import Db, one_error_line, parse_json
from tests.cli.test_narrow_tables_cli import on_a_terminal, widest_line
from tests.conftest import CliResult, PgTarget

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]
ERROR = "the upstream image server answered 503"


def words(text: str) -> list[str]:
    """Each line with its runs of spaces (column gaps, field alignment) made one."""
    return [" ".join(line.split()) for line in text.splitlines()]


def batch(db: Db, **fields: Any) -> SeededBatch:
    return db.call(lambda b: make_batch(b, **fields))


def settle(db: Db, seeded: SeededBatch, outcome: Any) -> Any:
    return db.call(lambda b: settle_child(b, seeded, outcome, error=ERROR))


def test_list_json_has_each_batch_with_its_progress_policy_and_finalizer(cli: Cli, db: Db) -> None:
    seeded = batch(db, size=4, threshold=3, metadata={"import": "march"})
    settle(db, seeded, "succeeded")
    settle(db, seeded, "failed")
    document = parse_json(cli("batches", "list", "--json"))
    assert document["count"] == 1
    (listed,) = document["batches"]
    assert listed["id"] == str(seeded.id)
    assert (listed["queue"], listed["status"], listed["expected_size"]) == ("batchq", "active", 4)
    assert listed["children"] == {
        "total": 4,
        "done": 2,
        "pending": 2,
        "failed": 1,
        "cancelled": 0,
        "archived": 0,
        "by_status": {"failed": 1, "pending": 2, "succeeded": 1},
    }
    assert (listed["consecutive_failures"], listed["failure_threshold"]) == (1, 3)
    assert listed["finalizer"] == {"actor": "notify_done", "job_id": None}  # not enqueued yet
    assert "T" in listed["created_at"] and listed["completed_at"] is None
    assert listed["metadata"] == {"import": "march"}


def test_list_filters_by_active_ended_and_queue(cli: Cli, db: Db) -> None:
    running = batch(db, queue="media", size=1)
    ended = batch(db, queue="reports", size=1)
    settle(db, ended, "succeeded")

    def ids(*flags: str) -> list[str]:
        return [b["id"] for b in parse_json(cli("batches", "list", "--json", *flags))["batches"]]

    assert set(ids()) == {str(running.id), str(ended.id)}
    assert ids("--active") == [str(running.id)]
    assert ids("--ended") == [str(ended.id)]
    assert ids("--queue", "reports") == [str(ended.id)]
    assert ids("--queue", "media", "--ended") == []
    (done,) = parse_json(cli("batches", "list", "--json", "--ended"))["batches"]
    assert done["status"] == "complete" and "T" in done["completed_at"]
    assert done["finalizer"]["job_id"] == str(ended.finalizer_job_id)  # enqueued as it ended


def test_list_table_shows_progress_failures_and_finalizer(cli: Cli, db: Db) -> None:
    seeded = batch(db, size=4, threshold=3)
    settle(db, seeded, "failed")
    result = cli("batches", "list")
    assert result.exit_code == 0, result.stderr
    header, row = result.stdout.splitlines()
    assert header.split() == [
        "id", "queue", "status", "done", "failed", "cancelled", "failures",
        "finalizer", "finalizer", "job", "created", "ended",
    ]  # fmt: skip
    cells = row.split()
    assert cells[:8] == [str(seeded.id), "batchq", "active", "1/4", "1", "0", "1/3", "notify_done"]
    assert cells[8] == "-"  # the finalizer is enqueued when the batch ends
    assert cells[10:] == ["ago", "-"]  # created some seconds ago; not ended


def test_an_empty_list_says_so_on_stderr_and_names_what_is_not_listed(cli: Cli, db: Db) -> None:
    db.enqueue(metadata={"batch_id": str(uuid4())})  # a plain tagged batch: no row
    result = cli("batches", "list")
    assert result.exit_code == 0 and result.stdout == ""
    assert "no batches match" in result.stderr and "failure policy or a finalizer" in result.stderr
    assert parse_json(cli("batches", "list", "--json")) == {"batches": [], "count": 0}
    help_text = " ".join(cli("batches", "list", "--help").stdout.split())
    assert "a plain tagged batch (children with metadata.batch_id only) is not" in help_text


def test_show_has_the_row_counts_by_status_finalizer_and_latest_failures(cli: Cli, db: Db) -> None:
    seeded = batch(db, size=5, threshold=4)
    failed, _ = settle(db, seeded, "failed")
    settle(db, seeded, "succeeded")
    result = cli("batches", "show", str(seeded.id))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert f"id         {seeded.id}" in out
    assert "status     active" in out
    assert "children   2 of 5 done (1 failed)" in out
    assert "failures   0 in a row; aborts at 4" in out
    assert "finalizer  notify_done (enqueued when the batch ends)" in out
    assert "children in the jobs table" in out
    by_status = {
        line.split()[0]: line.split()[1]
        for line in out.splitlines()
        if line.split()[:1] in (["pending"], ["failed"], ["succeeded"])
    }
    assert by_status == {"pending": "3", "failed": "1", "succeeded": "1"}
    assert "latest failed children" in out
    assert f"{failed.id} failed ConnectionError: {ERROR}" in words(out)


def test_show_json_has_the_batch_and_its_latest_failures(cli: Cli, db: Db) -> None:
    seeded = batch(db, size=2)
    failed, _ = settle(db, seeded, "failed")
    settle(db, seeded, "succeeded")
    document = parse_json(cli("batches", "show", str(seeded.id), "--json"))
    assert document["id"] == str(seeded.id) and document["status"] == "complete"
    assert document["children"]["done"] == 2 and document["children"]["failed"] == 1
    assert document["finalizer"] == {
        "actor": "notify_done",
        "job_id": str(seeded.finalizer_job_id),
    }
    (failure,) = document["recent_failures"]
    assert failure["id"] == str(failed.id)
    assert (failure["status"], failure["error_class"]) == ("failed", "ConnectionError")
    assert failure["error_message"] == ERROR


def test_show_takes_a_unique_prefix_or_suffix_of_the_id(cli: Cli, db: Db) -> None:
    seeded = batch(db, size=1)
    for piece in (seeded.id.hex[:10], str(seeded.id)[-12:], str(seeded.id)[:13]):
        document = parse_json(cli("batches", "show", piece, "--json"))
        assert document["id"] == str(seeded.id), piece


def test_show_of_a_plain_tagged_batch_counts_its_children(cli: Cli, db: Db) -> None:
    tag = uuid4()
    for _ in range(3):
        db.enqueue(metadata={"batch_id": str(tag)})
    result = cli("batches", "show", str(tag))
    assert result.exit_code == 0, result.stderr
    assert "untracked: no batch row" in result.stdout
    assert "0 of 3 done in the jobs table" in result.stdout
    document = parse_json(cli("batches", "show", str(tag), "--json"))
    assert document["status"] == "untracked" and document["children"]["total"] == 3


def test_unknown_ids_and_bad_input_are_one_line(cli: Cli, db: Db) -> None:
    batch(db, size=1)
    unknown = uuid4()
    assert f"no batch with id {unknown}" in one_error_line(cli("batches", "show", str(unknown)))
    assert "is not a batch id" in one_error_line(cli("batches", "show", "nope"))
    assert "no batch id starts or ends with 'abcabc'" in one_error_line(
        cli("batches", "show", "abcabc")
    )
    assert "--limit: 0 is out of range" in one_error_line(cli("batches", "list", "--limit", "0"))
    assert "unknown format 'xml'" in one_error_line(cli("batches", "list", "-o", "xml"))
    assert "give --json or -o wide, not both" in one_error_line(
        cli("batches", "list", "--json", "-o", "wide")
    )
    assert "--queue: must not be empty" in one_error_line(cli("batches", "list", "--queue", " "))
    assert "No such option" in one_error_line(cli("batches", "list", "--colour"))


def test_an_ambiguous_piece_is_refused_naming_the_matches(cli: Cli, db: Db) -> None:
    first, second = batch(db, size=1), batch(db, size=1)
    # Give the second batch an id sharing the first one's first four digits.
    db.sql(
        "UPDATE {schema}.batches SET id = $2 WHERE id = $1",
        second.id,
        uuid_with_prefix(first.id.hex[:4]),
    )
    line = one_error_line(cli("batches", "show", first.id.hex[:4]))
    assert "is ambiguous: 2 batches match" in line


def uuid_with_prefix(prefix: str) -> UUID:
    return UUID(prefix + uuid4().hex[len(prefix) :])


def test_every_batches_command_has_help_dsn_schema_and_json(cli: Cli) -> None:
    for command in (["batches", "list"], ["batches", "show"]):
        text = cli(*command, "--help").stdout
        assert "--dsn" in text and "--schema" in text and "--json" in text, command
    group = cli("batches")
    assert group.exit_code == 0 and "Commands" in group.stdout


# --- jobs show ------------------------------------------------------------------------------


def test_jobs_show_of_a_child_names_its_batch_and_progress(cli: Cli, db: Db) -> None:
    seeded = batch(db, size=3, threshold=5)
    failed, _ = settle(db, seeded, "failed")
    out = cli("jobs", "show", str(failed.id)).stdout
    assert f"batch {seeded.id}: active, 1 of 3 done (1 failed)" in words(out), out
    document = parse_json(cli("jobs", "show", str(failed.id), "--json"))
    assert document["batch"]["role"] == "child"
    assert document["batch"]["id"] == str(seeded.id)
    assert document["batch"]["status"] == "active"
    assert document["batch"]["children"]["done"] == 1


def test_jobs_show_of_the_finalizer_names_the_batch_it_finalizes(cli: Cli, db: Db) -> None:
    seeded = batch(db, size=1)
    settle(db, seeded, "succeeded")
    out = cli("jobs", "show", str(seeded.finalizer_job_id)).stdout
    assert f"batch finalizer of batch {seeded.id}: complete, 1 of 1 done" in words(out), out
    document = parse_json(cli("jobs", "show", str(seeded.finalizer_job_id), "--json"))
    assert document["batch"]["role"] == "finalizer"
    assert document["batch"]["id"] == str(seeded.id)


@pytest.mark.slow
def test_list_keeps_every_id_whole_at_80_columns(db: Db, pg: PgTarget) -> None:
    seeded = [batch(db, queue="media_thumbnails_for_the_gallery", size=2) for _ in range(2)]
    settle(db, seeded[0], "succeeded")
    settle(db, seeded[0], "succeeded")
    text = on_a_terminal(pg, "batches", "list")
    assert "…" not in text
    assert widest_line(text) <= 80, text
    for each in seeded:
        assert str(each.id) in text, text
    assert "not shown at this width" in text
