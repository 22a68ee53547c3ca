"""The scenarios, in the order ``make chaos`` runs them.

Each is an ``async def run(h: Harness, short: bool)`` that starts real processes, injects one
kind of fault, records the checks only it can make, and ends with ``h.finish(...)`` for the
invariants every scenario shares. ``short`` scales it down for CI.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from chaos.harness import Harness
from chaos.scenarios import database, leader, pause, shutdown, storm, workgroup


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    run: Callable[[Harness, bool], Awaitable[None]]
    needs_connection: bool = False  # uses JobContext.connection() (transactional completion)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("kill9-storm", storm.SUMMARY, storm.run_plain),
        Scenario("kill9-storm-tx", storm.SUMMARY_TX, storm.run_transactional, True),
        Scenario("pg-restarts", database.SUMMARY, database.run),
        Scenario("sigstop-child", workgroup.SUMMARY_STOP, workgroup.run_sigstop),
        Scenario("kill9-supervisor", workgroup.SUMMARY_KILL, workgroup.run_supervisor_kill),
        Scenario("sigterm-inflight", shutdown.SUMMARY, shutdown.run),
        Scenario("pause", pause.SUMMARY, pause.run),
        Scenario("kill9-leader", leader.SUMMARY, leader.run),
        Scenario("leader-pause", leader.SUMMARY_PAUSE, leader.run_pause),
    )
}
