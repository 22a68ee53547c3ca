"""Marker lines the chaos actors append, and the runner's reading of them.

One line per event: ``<kind> <job_id> <attempt> <pid>``, with kind ``start`` (the body began),
``done`` (the body returned its result) or ``stopped`` (a cooperative body saw its cancel and
returned early). Each line is one ``write`` on a file opened with ``O_APPEND``, so lines from
many processes never interleave and a SIGKILL loses at most the line it was about to write.
No database is involved: the markers stay true while PostgreSQL is down.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

ENV_VAR = "CHAOS_MARKERS"


def record(kind: str, job_id: UUID, attempt: int) -> None:
    """Append one marker line to the file ``CHAOS_MARKERS`` names (nothing when unset)."""
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    line = f"{kind} {job_id} {attempt} {os.getpid()}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Marker:
    kind: str
    job_id: UUID
    attempt: int
    pid: int


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
            if len(parts) != 4:
                continue
            try:
                lines.append(Marker(parts[0], UUID(parts[1]), int(parts[2]), int(parts[3])))
            except ValueError:
                continue
        return cls(lines)

    def of_kind(self, kind: str) -> list[Marker]:
        return [m for m in self.lines if m.kind == kind]

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
        """Jobs whose body started in process ``pid`` and has not ended there."""
        started = {m.job_id for m in self.lines if m.pid == pid and m.kind == "start"}
        ended = {m.job_id for m in self.lines if m.pid == pid and m.kind in ("done", "stopped")}
        return started - ended

    def finished_by(self, job_id: UUID) -> set[int]:
        """Pids whose run of ``job_id`` reached ``done``."""
        return {m.pid for m in self.of_kind("done") if m.job_id == job_id}
