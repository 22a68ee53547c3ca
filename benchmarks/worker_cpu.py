"""The CPU a worker process spends over a drain, by where it runs: the event loop's thread,
the worker's other threads, its child processes (the span exporter).

A no-op drain's rate is set by the event loop's thread: what a job costs that one thread.
On a shared 2-core machine the rates of two drains a minute apart differ by a fifth, while
the loop's CPU a job holds within a few percent, so the sections that compare a feature with
a plain drain report it beside the rates.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import psutil

Part = Literal["loop", "threads", "children"]


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds (or, per job, microseconds) of the loop's thread, the other threads and
    the child processes."""

    loop: float
    threads: float
    children: float

    def since(self, start: CpuUse) -> CpuUse:
        """What was spent from ``start`` to this one."""
        return CpuUse(
            self.loop - start.loop, self.threads - start.threads, self.children - start.children
        )

    def per_job(self, jobs: int) -> CpuUse:
        """Microseconds a job."""
        return CpuUse(self.loop / jobs * 1e6, self.threads / jobs * 1e6, self.children / jobs * 1e6)


def cpu_use(pid: int) -> CpuUse | None:
    """The worker process ``pid``'s CPU so far; None once it has exited (a worker run with
    ``--until-idle`` may end as its last job does)."""
    try:
        process = psutil.Process(pid)
        loop = threads = 0.0
        for thread in process.threads():
            spent = thread.user_time + thread.system_time
            if thread.id == pid:  # the main thread's id is the process's (Linux)
                loop += spent
            else:
                threads += spent
        children = process.children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    spent_by_children = 0.0
    for child in children:
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        spent_by_children += times.user + times.system
    return CpuUse(loop, threads, spent_by_children)


def median_part(uses: Iterable[CpuUse | None], part: Part) -> float | None:
    """The median of ``part`` (``loop``, ``threads`` or ``children``) over the rounds that
    have a figure."""
    known = [getattr(use, part) for use in uses if use is not None]
    return statistics.median(known) if known else None
