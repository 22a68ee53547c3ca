"""The per-body ledger the chaos actors append to, and the runner's reading of it.

One line per event: ``<kind> <job_id> <attempt> <pid> <body> <time>``. Every body writes two:
``start`` when it begins and, whatever happens to it, one end line saying how it ended:
``done`` (returned its result), ``stopped`` (a cooperative body saw its cancel and returned
early), ``cancelled`` (its task was cancelled) or ``raised`` (anything else). ``body`` numbers
the bodies of one process, so a start is paired with its own end even when two bodies of one
(job, attempt) run at once; ``time`` is ``time.time()``, the host's wall clock, the one the
database's ``clock_timestamp()`` reads too, so a body's start compares with a row's
``finished_at``. Each line is one ``write`` on a file opened with ``O_APPEND``, so lines from
many processes never interleave and a SIGKILL loses at most the line it was about to write.
No database is involved: the ledger stays true while PostgreSQL is down.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from taskq_core.actors import JobContext

ENV_VAR = "CHAOS_MARKERS"
END_KINDS = ("done", "stopped", "cancelled", "raised")

_numbers = itertools.count(1)  # next() on a count is atomic: threads may take numbers too


def record(kind: str, job_id: UUID, attempt: int, body: int = 0, at: float | None = None) -> None:
    """Append one marker line to the file ``CHAOS_MARKERS`` names (nothing when unset); ``at``
    is the event's time when it was read before now."""
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    when = time.time() if at is None else at
    line = f"{kind} {job_id} {attempt} {os.getpid()} {body} {when:.6f}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@dataclass(slots=True)
class BodyMark:
    """A running body's handle: it says how the body ended if it did not just return."""

    job_id: UUID
    attempt: int
    number: int
    ending: str = "done"

    def stopped(self) -> None:
        """The body returned early because it was asked to stop."""
        self.ending = "stopped"


@contextmanager
def body(ctx: JobContext[Any]) -> Iterator[BodyMark]:
    """Record a body's start, and its end however it ends (returned, cancelled, raised).

    The start is dated when the worker let the body start (its last lease check, which the
    context keeps), not at this line: a process stopped between the two resumes a body that
    had begun, and its first line then runs after the stop, however long it lasted."""
    job_id, attempt = ctx.job_id, ctx.attempt
    mark = BodyMark(job_id, attempt, next(_numbers))
    record("start", job_id, attempt, mark.number, at=ctx._let_start_at)
    ending = "raised"
    try:
        yield mark
        ending = mark.ending
    except asyncio.CancelledError:
        ending = "cancelled"
        raise
    finally:
        record(ending, job_id, attempt, mark.number)


@dataclass(frozen=True, slots=True)
class Marker:
    kind: str
    job_id: UUID
    attempt: int
    pid: int
    body: int
    at: float


@dataclass(frozen=True, slots=True)
class Body:
    """One body: its start and, unless its process died first (or it still runs), its end."""

    job_id: UUID
    attempt: int
    pid: int
    number: int
    started: float
    ended: float | None
    ending: str | None

    def overlaps(self, other: Body) -> bool:
        """Whether the two ran at the same time (an unended body runs on forever)."""
        mine = math.inf if self.ended is None else self.ended
        theirs = math.inf if other.ended is None else other.ended
        return self.started < theirs and other.started < mine

    def describe(self) -> str:
        end = "no end" if self.ended is None else f"{self.ending} {self.ended:.3f}"
        return f"attempt {self.attempt} pid {self.pid} {self.started:.3f}-{end}"


@dataclass
class Markers:
    """Everything one marker file says, indexed the ways the invariants ask."""

    lines: list[Marker] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> Markers:
        """Parse ``path``, skipping any line that is not a whole marker."""
        if not path.exists():
            return cls()
        lines: list[Marker] = []
        for raw in path.read_text().splitlines():
            parts = raw.split()
            if len(parts) != 6:
                continue
            try:
                kind, job, attempt, pid, number, at = parts
                marker = Marker(kind, UUID(job), int(attempt), int(pid), int(number), float(at))
            except ValueError:
                continue
            lines.append(marker)
        return cls(lines)

    def of_kind(self, kind: str) -> list[Marker]:
        return [m for m in self.lines if m.kind == kind]

    def bodies(self) -> list[Body]:
        """Every body that started, paired with its end line, in the order they started."""
        ends = {(m.pid, m.body): m for m in self.lines if m.kind in END_KINDS}
        out: list[Body] = []
        for m in self.of_kind("start"):
            end = ends.get((m.pid, m.body))
            out.append(
                Body(m.job_id, m.attempt, m.pid, m.body, m.at,
                     end.at if end else None, end.kind if end else None)
            )  # fmt: skip
        return sorted(out, key=lambda b: b.started)

    def bodies_of(self, job_id: UUID) -> list[Body]:
        return [b for b in self.bodies() if b.job_id == job_id]

    def started(self) -> set[tuple[UUID, int]]:
        """(job, attempt) pairs whose body began at least once."""
        return {(m.job_id, m.attempt) for m in self.of_kind("start")}

    def started_jobs(self) -> set[UUID]:
        return {m.job_id for m in self.of_kind("start")}

    def done_counts(self) -> Counter[UUID]:
        """How many times each job's body ran to its end."""
        return Counter(m.job_id for m in self.of_kind("done"))

    def completed_twice(self) -> int:
        """Jobs whose body ran to its end more than once."""
        return sum(1 for count in self.done_counts().values() if count > 1)

    def in_flight(self, pid: int) -> set[UUID]:
        """Jobs with a body that started in process ``pid`` and has not ended there."""
        return {b.job_id for b in self.bodies() if b.pid == pid and b.ended is None}

    def finished_by(self, job_id: UUID) -> set[int]:
        """Pids whose run of ``job_id`` reached ``done``."""
        return {m.pid for m in self.of_kind("done") if m.job_id == job_id}

    def overlapping(self) -> list[tuple[Body, Body]]:
        """Pairs of bodies of one job that ran at the same time in one process."""
        by_place: dict[tuple[UUID, int], list[Body]] = defaultdict(list)
        for b in self.bodies():
            by_place[(b.job_id, b.pid)].append(b)
        pairs: list[tuple[Body, Body]] = []
        for bodies in by_place.values():
            for i, first in enumerate(bodies):
                pairs.extend((first, later) for later in bodies[i + 1 :] if first.overlaps(later))
        return pairs

    def attempts_reused(self) -> dict[tuple[UUID, int], list[Body]]:
        """(job, attempt) pairs that more than one body started under, with those bodies."""
        by_attempt: dict[tuple[UUID, int], list[Body]] = defaultdict(list)
        for b in self.bodies():
            by_attempt[(b.job_id, b.attempt)].append(b)
        return {key: bodies for key, bodies in by_attempt.items() if len(bodies) > 1}

    def started_after(self, ended: dict[UUID, float]) -> list[tuple[Body, float]]:
        """Bodies that started after their job had ended (``ended``: job -> epoch seconds)."""
        return [
            (b, ended[b.job_id])
            for b in self.bodies()
            if b.job_id in ended and b.started > ended[b.job_id]
        ]
