"""Tables on an 80-column terminal: ids and numbers are never cut (no ``…``, no id split over
lines); text wraps and whole columns give way instead, a note names them, and ``-o wide``
shows every column. Rendered by the real binary on a pseudo-terminal at COLUMNS=80."""

from __future__ import annotations

import re
from uuid import uuid4

import pytest

from tests.cli.conftest import Db
from tests.conftest import TASKQ_BIN, PgTarget

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

LONG_MESSAGE = "the upstream image server answered 503 Service Unavailable after 30s"


def on_a_terminal(pg: PgTarget, *args: str, columns: int = 80) -> str:
    """What ``taskq ARGS`` shows on a terminal ``columns`` wide (stdout and stderr)."""
    import pexpect

    child = pexpect.spawn(
        TASKQ_BIN,
        list(args),
        env=pg.env(TERM="xterm-256color", COLUMNS=str(columns), LINES="40"),
        encoding="utf-8",
        dimensions=(40, columns),
        timeout=60,
    )
    text: str = child.read()
    child.wait()
    # Bold headers stay on with NO_COLOR; their escape codes take no columns.
    return re.sub(r"\x1b\[[0-9;]*m", "", text.replace("\r\n", "\n"))


def widest_line(text: str) -> int:
    """The widest line of the table (the stderr note about hidden columns aside)."""
    return max(len(line) for line in text.splitlines() if not line.startswith("not shown"))


def test_jobs_list_keeps_every_id_whole_at_80_columns(db: Db, pg: PgTarget) -> None:
    failed = db.failed_job("resize_uploaded_image_for_the_gallery", queue="media_thumbnails")
    db.sql("UPDATE {schema}.jobs SET error_message = $2 WHERE id = $1", failed.id, LONG_MESSAGE)
    waiting = [db.enqueue("send_welcome_email", queue="notifications") for _ in range(3)]
    text = on_a_terminal(pg, "jobs", "list")
    assert "…" not in text
    assert widest_line(text) <= 80, text
    for job in [failed, *waiting]:
        assert str(job.id) in text, text  # whole, on one line
    assert "not shown at this width" in text and "-o wide" in text


def test_jobs_list_wide_shows_the_error_message_and_every_column(db: Db, pg: PgTarget) -> None:
    failed = db.failed_job("resize", queue="media")
    db.sql("UPDATE {schema}.jobs SET error_message = $2 WHERE id = $1", failed.id, LONG_MESSAGE)
    text = on_a_terminal(pg, "jobs", "list", "-o", "wide")
    assert "…" not in text
    assert f"ValueError: {LONG_MESSAGE}" in text
    for header in ("id", "actor", "queue", "status", "attempt", "age", "error"):
        assert re.search(rf"\b{header}\b", text.splitlines()[0]), text
    assert "not shown" not in text


def test_queues_list_keeps_every_count_whole_at_80_columns(db: Db, pg: PgTarget) -> None:
    db.sql(
        "INSERT INTO {schema}.jobs (id, actor, queue, status, payload, max_attempts,"
        " retry_kind, scheduled_at) SELECT gen_random_uuid(), 'work', 'bulk_ingest', 'pending',"
        " '{}', 3, 'transient', clock_timestamp() FROM generate_series(1, 12345)"
    )
    db.failed_job(queue="bulk_ingest")
    db.succeeded_job(queue="bulk_ingest")
    db.cancelled_job(queue=f"q_{uuid4().hex[:6]}")
    text = on_a_terminal(pg, "queues", "list")
    assert "…" not in text
    assert widest_line(text) <= 80, text
    assert "12345" in text


def test_workers_list_keeps_ids_and_pids_whole_at_80_columns(db: Db, pg: PgTarget) -> None:
    worker = db.register_worker(
        ["media", "notifications", "default"], ["resize"], label="thumbnails-eu-west-1"
    )
    text = on_a_terminal(pg, "workers", "list")
    assert "…" not in text
    assert widest_line(text) <= 80, text
    assert str(worker) in text and "4242" in text


def test_output_wide_and_json_are_the_formats(db: Db, pg: PgTarget) -> None:
    db.enqueue()
    text = on_a_terminal(pg, "jobs", "list", "-o", "sideways")
    assert "error: -o/--output: unknown format 'sideways' (use table, wide or json)" in text
    assert '"jobs"' in on_a_terminal(pg, "jobs", "list", "-o", "json")
