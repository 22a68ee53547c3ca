"""What the jobs pane (and the web UI's jobs list) selects: ``JobsFilter`` and its text form.

``queue=NAME actor=NAME status=S1,S2`` is what an operator types in ``taskq top``'s filter
box; the default filter lists recent failures.
"""

from __future__ import annotations

from dataclasses import dataclass

from taskq_core.backend.protocol import JobFilter
from taskq_core.statemachine import JobStatus, parse_status

# The jobs pane opens on what is failing: jobs that failed for good or whose worker died.
DEFAULT_JOB_STATUSES: tuple[JobStatus, ...] = (JobStatus.FAILED, JobStatus.CRASHED)
_FILTER_KEYS = ("queue", "actor", "status")


@dataclass(frozen=True)
class JobsFilter:
    """What the jobs pane lists: these statuses (empty: any), of this queue and actor."""

    statuses: tuple[JobStatus, ...] = DEFAULT_JOB_STATUSES
    queue: str | None = None
    actor: str | None = None

    @classmethod
    def parse(cls, text: str) -> JobsFilter:
        """Read ``queue=NAME actor=NAME status=S1,S2`` (any order, each optional).

        ``status=all`` lists every status; without a ``status`` term the default (recent
        failures) applies. An empty text is the default filter. Raises ValueError with a
        one-line reason for anything else.
        """
        values: dict[str, str] = {}
        for term in text.split():
            key, sep, value = term.partition("=")
            if not sep or key not in _FILTER_KEYS or not value:
                raise ValueError(
                    f"cannot read {term!r}: use queue=NAME, actor=NAME, status=S1,S2 or status=all"
                )
            if key in values:
                raise ValueError(f"{key} is given twice")
            values[key] = value
        statuses = DEFAULT_JOB_STATUSES
        if "status" in values:
            names = [name for name in values["status"].split(",") if name]
            if not names:
                raise ValueError("status needs at least one status name (or all)")
            statuses = () if names == ["all"] else tuple(parse_status(name) for name in names)
        return cls(statuses=statuses, queue=values.get("queue"), actor=values.get("actor"))

    @property
    def is_default(self) -> bool:
        """Whether this is the opening filter (recent failures of every queue and actor)."""
        return self == JobsFilter()

    def to_text(self) -> str:
        """The filter in the syntax ``parse`` reads (empty for the default)."""
        if self.is_default:
            return ""
        terms = []
        if self.queue is not None:
            terms.append(f"queue={self.queue}")
        if self.actor is not None:
            terms.append(f"actor={self.actor}")
        if self.statuses != DEFAULT_JOB_STATUSES:
            names = ",".join(s.value for s in self.statuses) or "all"
            terms.append(f"status={names}")
        return " ".join(terms)

    def describe(self) -> str:
        """A title for the jobs pane."""
        if self.statuses == DEFAULT_JOB_STATUSES:
            head = "Recent failures"
        elif not self.statuses:
            head = "Recent jobs"
        else:
            head = "Recent " + ", ".join(s.value for s in self.statuses)
        scope = [f"queue {self.queue}"] if self.queue else []
        scope += [f"actor {self.actor}"] if self.actor else []
        return head + (f" ({', '.join(scope)})" if scope else "")

    def job_filter(self, limit: int) -> JobFilter:
        """The Backend filter for ``list_recent_jobs``."""
        return JobFilter(
            status=list(self.statuses) or None, queue=self.queue, actor=self.actor, limit=limit
        )
