"""The jobs page's filter as its URL says it: read from the query string, checked, and
written back, so a filtered page, its live part and its next page each have a stable URL.

The names are the query parameters: ``status`` (repeat, or ``a,b``), ``queue`` and
``actor`` (repeat for several), ``created_since``/``created_until`` and
``finished_since``/``finished_until`` (how long ago, ``2h``, or an ISO-8601 time, as
``taskq jobs list --since`` reads them), ``batch`` (a batch id), ``cursor`` (where the page
starts: ``taskq jobs list``'s cursor) and ``limit``. Empty values count as absent (a GET form
sends every field). The read is ``JobQuery``: a keyset page of ``search_jobs``, never an
offset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode
from uuid import UUID

from taskq_cli import inputs, job_cursor
from taskq_core.backend.protocol.admin import JobQuery
from taskq_core.errors import ConfigError
from taskq_core.statemachine import JobStatus

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# The page says "more than N" past this many matches: counting further costs more than it
# tells an operator (the count walks every match up to it).
COUNT_MAX = 1_000
TIME_PARAMS = ("created_since", "created_until", "finished_since", "finished_until")
# Every parameter the page reads, in the order its URLs write them.
PARAMS = ("status", "queue", "actor", *TIME_PARAMS, "batch", "limit", "cursor")
_STATUSES = frozenset(JobStatus)

Params = Mapping[str, Sequence[str]]


class FilterError(ValueError):
    """A query parameter the jobs page cannot read; the message names it."""


@dataclass(frozen=True)
class JobsView:
    """One filter of the jobs page: what is asked (as typed, for the form and the URL) and
    what it means (for the read)."""

    statuses: tuple[JobStatus, ...] = ()
    queues: tuple[str, ...] = ()
    actors: tuple[str, ...] = ()
    # Parameter name -> (the text given, what it means).
    times: tuple[tuple[str, str, datetime | timedelta], ...] = ()
    batch: UUID | None = None
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None
    after: tuple[datetime, UUID] | None = None

    def time_text(self, name: str) -> str:
        """The text given for one of TIME_PARAMS (empty when not given)."""
        return next((text for key, text, _ in self.times if key == name), "")

    def _bound(self, name: str) -> datetime | timedelta | None:
        return next((value for key, _, value in self.times if key == name), None)

    def job_query(self) -> JobQuery:
        """The keyset read this filter asks for."""
        return JobQuery(
            statuses=self.statuses or None,
            queues=self.queues or None,
            actors=self.actors or None,
            created_since=self._bound("created_since"),
            created_until=self._bound("created_until"),
            finished_since=self._bound("finished_since"),
            finished_until=self._bound("finished_until"),
            batch_id=self.batch,
            after=self.after,
            limit=self.limit,
            count_max=COUNT_MAX,
        )

    @property
    def is_filtered(self) -> bool:
        """Whether anything narrows the list (the cursor and the page size do not)."""
        return bool(self.statuses or self.queues or self.actors or self.times or self.batch)

    def pairs(self, *, cursor: bool = True) -> list[tuple[str, str]]:
        """The query parameters that say this filter, in PARAMS order."""
        pairs = [("status", status.value) for status in self.statuses]
        pairs += [("queue", queue) for queue in self.queues]
        pairs += [("actor", actor) for actor in self.actors]
        pairs += [(name, self.time_text(name)) for name in TIME_PARAMS if self.time_text(name)]
        if self.batch is not None:
            pairs.append(("batch", str(self.batch)))
        if self.limit != DEFAULT_LIMIT:
            pairs.append(("limit", str(self.limit)))
        if cursor and self.cursor is not None:
            pairs.append(("cursor", self.cursor))
        return pairs

    def url(self, *, part: str | None = None) -> str:
        """This page's URL (``part=live``: its live part)."""
        pairs = self.pairs() + ([("part", part)] if part else [])
        return "/jobs" + (f"?{urlencode(pairs)}" if pairs else "")

    def first_page_url(self) -> str:
        """The same filter from its newest job."""
        return replace(self, cursor=None, after=None).url()

    def next_page(self, next_after: tuple[datetime, UUID] | None) -> JobsView | None:
        """The page after this one, from the read's ``next_after`` (None: the last)."""
        if next_after is None:
            return None
        return replace(self, cursor=job_cursor.encode(next_after), after=next_after)


def parse(params: Params) -> JobsView:
    """The filter the query parameters say; FilterError naming the first one that is wrong.

    Parameters other than PARAMS (``part``) are left to the caller."""

    def values(name: str) -> list[str]:
        return [value for value in params.get(name, ()) if value.strip()]

    def single(name: str) -> str | None:
        given = values(name)
        if len(given) > 1:
            raise FilterError(f"{name}: give it once")
        return given[0].strip() if given else None

    try:
        statuses = inputs.parse_statuses(values("status"), "status", allowed=_STATUSES) or []
        times = []
        for name in TIME_PARAMS:
            text = single(name)
            if text is not None:
                times.append((name, text, _time_bound(text, name)))
        queues = inputs.parse_names([v.strip() for v in values("queue")], "queue") or ()
        actors = inputs.parse_names([v.strip() for v in values("actor")], "actor") or ()
    except ConfigError as exc:
        raise FilterError(str(exc)) from None
    return JobsView(
        # Enum order: the same statuses in any order are the same URL.
        statuses=tuple(s for s in JobStatus if s in statuses),
        queues=queues,
        actors=actors,
        times=tuple(times),
        batch=_batch(single("batch")),
        limit=_limit(single("limit")),
        cursor=(cursor := single("cursor")),
        after=None if cursor is None else _after(cursor),
    )


def _time_bound(text: str, name: str) -> datetime | timedelta:
    bound = inputs.parse_time_bound(text, name)
    if isinstance(bound, datetime):
        try:
            return bound.astimezone(UTC)
        except OverflowError:  # a moment at the very edge of the calendar, shifted past it
            raise FilterError(f"{name}: {text!r} is out of range") from None
    return bound


def _batch(text: str | None) -> UUID | None:
    if text is None:
        return None
    try:
        return UUID(text)
    except ValueError:
        raise FilterError(f"batch: {text!r} is not a batch id (a UUID)") from None


def _limit(text: str | None) -> int:
    if text is None:
        return DEFAULT_LIMIT
    if (
        not (text.isascii() and text.isdigit() and len(text) <= 4)
        or not 1 <= int(text) <= MAX_LIMIT
    ):
        raise FilterError(f"limit: {text!r} is not a number from 1 to {MAX_LIMIT}")
    return int(text)


def _after(cursor: str) -> tuple[datetime, UUID]:
    try:
        return job_cursor.decode(cursor)
    except ConfigError:
        raise FilterError(
            f"cursor: {cursor!r} is not a cursor (follow the page's next link)"
        ) from None


def has_empty_values(params: Params) -> bool:
    """Whether the query string carries empty fields (a GET form's), which the canonical
    URL leaves out."""
    return any(not value.strip() for name in PARAMS for value in params.get(name, ()))
