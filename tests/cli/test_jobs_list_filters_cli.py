"""`taskq jobs list`: repeated --queue/--actor widen, --since/--until bound created_at on the
database clock, and --json pages with a total and a cursor that walks every job once."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.cli.conftest import Db, one_error_line, parse_json
from tests.conftest import CliResult

pytestmark = pytest.mark.postgres

Cli = Callable[..., CliResult]


def listed(cli: Cli, *args: str) -> dict[str, Any]:
    document: dict[str, Any] = parse_json(cli("jobs", "list", "--json", *args))
    return document


def ids(document: dict[str, Any]) -> set[str]:
    return {job["id"] for job in document["jobs"]}


def created_ago(db: Db, job_id: object, ago: timedelta) -> None:
    db.sql(
        "UPDATE {schema}.jobs SET created_at = clock_timestamp() - $2::interval WHERE id = $1",
        job_id,
        ago,
    )


def test_repeated_queue_and_actor_filters_combine(cli: Cli, db: Db) -> None:
    media = db.enqueue("resize", queue="media")
    mail = db.enqueue("email", queue="mail")
    db.enqueue("report", queue="reports")
    both = listed(cli, "--queue", "media", "--queue", "mail")
    assert ids(both) == {str(media.id), str(mail.id)}
    assert both["total"] == 2
    narrowed = listed(cli, "--queue", "media", "--queue", "mail", "--actor", "email")
    assert ids(narrowed) == {str(mail.id)}
    actors = listed(cli, "--actor", "email", "--actor", "resize")
    assert ids(actors) == {str(media.id), str(mail.id)}


def test_since_and_until_bound_when_jobs_were_created(cli: Cli, db: Db) -> None:
    old, middle, new = db.enqueue(), db.enqueue(), db.enqueue()
    created_ago(db, old.id, timedelta(days=3))
    created_ago(db, middle.id, timedelta(hours=5))
    assert ids(listed(cli, "--since", "1h")) == {str(new.id)}
    assert ids(listed(cli, "--since", "1d")) == {str(new.id), str(middle.id)}
    assert ids(listed(cli, "--until", "1h")) == {str(old.id), str(middle.id)}
    assert ids(listed(cli, "--since", "2d", "--until", "PT1H")) == {str(middle.id)}
    moment = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    assert ids(listed(cli, "--until", moment)) == {str(old.id)}
    assert ids(listed(cli, "--since", moment)) == {str(new.id), str(middle.id)}


def test_bad_time_bounds_and_cursors_are_one_line(cli: Cli) -> None:
    assert "--since: cannot read 'yesterday'" in one_error_line(
        cli("jobs", "list", "--since", "yesterday")
    )
    assert "--until: '-2h' is negative" in one_error_line(cli("jobs", "list", "--until", "-2h"))
    assert "--cursor: 'abc' is not a cursor" in one_error_line(
        cli("jobs", "list", "--cursor", "abc")
    )


def test_json_pages_carry_the_total_and_a_cursor_to_the_next_page(cli: Cli, db: Db) -> None:
    made = {str(db.enqueue(queue="pages").id) for _ in range(5)}
    db.enqueue(queue="elsewhere")
    seen: list[str] = []
    cursor: list[str] = []
    for _ in range(5):
        page = listed(cli, "--queue", "pages", "--limit", "2", *cursor)
        assert (page["total"], page["total_exact"]) == (5, True)
        seen += [job["id"] for job in page["jobs"]]
        if page["next_cursor"] is None:
            break
        cursor = ["--cursor", page["next_cursor"]]
    assert len(seen) == 5 and set(seen) == made
    assert page["count"] == 1


def test_the_human_listing_names_the_next_cursor(cli: Cli, db: Db) -> None:
    for _ in range(3):
        db.enqueue()
    result = cli("jobs", "list", "--limit", "2")
    assert result.exit_code == 0
    cursor = result.stderr.split("--cursor ")[1].split()[0]
    rest = listed(cli, "--cursor", cursor)
    assert rest["count"] == 1 and rest["next_cursor"] is None
