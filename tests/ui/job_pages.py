"""Helpers of the jobs and batches page tests: reading a list page's rows and next link,
and moving a job's timestamps back as the database would have written them earlier."""

from __future__ import annotations

import re
from datetime import timedelta
from uuid import UUID

import asyncpg

from tests.conftest import PgTarget

# What htmx adds to its requests.
HTMX = {"hx-request": "true"}
_JOB_ROW = re.compile(r'<tr data-job="([0-9a-f-]{36})"')
_NEXT = re.compile(r'<a href="(/jobs\?[^"]*)" rel="next">')


def job_ids(html: str) -> list[UUID]:
    """The jobs a page lists, in order (each row carries its job's id)."""
    return [UUID(found) for found in _JOB_ROW.findall(html)]


def next_link(html: str) -> str | None:
    """The jobs page's link to its next page (None on the last)."""
    found = _NEXT.search(html)
    return None if found is None else found.group(1).replace("&amp;", "&")


async def set_times(
    target: PgTarget,
    job_id: UUID,
    *,
    created_ago: timedelta | None = None,
    finished_ago: timedelta | None = None,
) -> None:
    """Set a job's ``created_at`` and ``finished_at`` that long before the database's now."""
    conn = await asyncpg.connect(target.dsn)
    try:
        await conn.execute(
            f"""UPDATE {target.schema}.jobs
                SET created_at = COALESCE(now() - $2::interval, created_at),
                    finished_at = COALESCE(now() - $3::interval, finished_at)
                WHERE id = $1""",
            job_id,
            created_ago,
            finished_ago,
        )
    finally:
        await conn.close()
