"""WorkgroupManager, replayed: fake children, a fake clock and a scripted workers table."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from taskq_core.backend.protocol import WorkerRow
from taskq_core.clock import FakeClock
from taskq_core.supervisor.children import ChildLaunch
from taskq_core.supervisor.manager import WorkgroupManager
from taskq_core.supervisor.plan import ChildPlan, WorkgroupPlan
from taskq_core.supervisor.policy import RestartPolicy
from taskq_core.supervisor.schema import HealthSettings
from taskq_core.supervisor.status import ChildState, SupervisorEvent

HOST = "host-a"
INSTANCE = "01900000-0000-7000-8000-000000000001"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = RestartPolicy(
    backoff_initial=1.0, backoff_max=8.0, backoff_reset_after=30.0, burst_limit=3, burst_window=60.0
)
HEALTH = HealthSettings(enabled=True, check_interval=1.0, stale_after=5.0, start_timeout=10.0)


def make_plan(
    specs: dict[str, int],
    *,
    until_idle: bool = False,
    health: HealthSettings = HEALTH,
    restart: RestartPolicy = POLICY,
    shutdown_timeout: float = 10.0,
) -> WorkgroupPlan:
    children = []
    for spec, processes in specs.items():
        for ordinal in range(1, processes + 1):
            label = f"{spec}-{ordinal}"
            children.append(
                ChildPlan(
                    label=label,
                    spec=spec,
                    argv=("python", "-m", "taskq_cli", "worker", "--label", label),
                    env={"TASKQ_WORKER_LABEL": label, "TASKQ_WORKGROUP_INSTANCE": INSTANCE},
                    queues=("default",),
                    concurrency=4,
                    poll_interval=1.0,
                    health=health,
                    health_socket=Path("/run/taskq") / f"{label}.sock",
                )
            )
    return WorkgroupPlan(
        file=Path("group.toml"),
        instance=INSTANCE,
        until_idle=until_idle,
        runtime_dir=Path("/run/taskq"),
        shutdown_timeout=shutdown_timeout,
        restart=restart,
        children=tuple(children),
    )


@dataclass
class FakeChild:
    """A child that exits when the test says so (or on SIGKILL, like a real one)."""

    launch: ChildLaunch
    pid: int
    returncode: int | None = None
    signals: list[int] = field(default_factory=list)
    exits_on_sigterm: bool = True

    def poll(self) -> int | None:
        return self.returncode

    def signal(self, signum: int) -> None:
        if self.returncode is not None:
            return
        self.signals.append(signum)
        if signum == signal.SIGKILL:
            self.returncode = -signal.SIGKILL
        elif signum == signal.SIGTERM and self.exits_on_sigterm:
            self.returncode = 0

    def exit(self, code: int) -> None:
        self.returncode = code


class Harness:
    """Drives one manager: step the clock, script exits and heartbeats, read the events."""

    def __init__(
        self,
        plan: WorkgroupPlan,
        *,
        health: bool = True,
        read_plan: Callable[[], WorkgroupPlan] | None = None,
    ) -> None:
        self.clock = FakeClock()
        self.events: list[SupervisorEvent] = []
        self.children: list[FakeChild] = []
        self.rows: dict[int, WorkerRow] = {}
        self.health_error: Exception | None = None
        self.spawn_error: OSError | None = None
        self.exits_on_sigterm = True
        # The exits written into workers rows: (worker id, exit status, signal name).
        self.recorded: list[tuple[UUID, int | None, str | None]] = []
        self.record_error: Exception | None = None
        self.manager = WorkgroupManager(
            plan,
            spawn=self.spawn,
            clock=self.clock,
            health_source=self.read_workers if health else None,
            emit=self.events.append,
            hostname=HOST,
            base_env={"BASE": "1", "TASKQ_WORKER_LABEL": "inherited"},
            read_plan=read_plan,
            record_exit=self.record_exit,
        )

    async def record_exit(self, worker_id: UUID, code: int | None, signal: str | None) -> bool:
        if self.record_error is not None:
            raise self.record_error
        self.recorded.append((worker_id, code, signal))
        return True

    def spawn(self, launch: ChildLaunch) -> FakeChild:
        if self.spawn_error is not None:
            raise self.spawn_error
        child = FakeChild(launch, pid=1000 + len(self.children))
        child.exits_on_sigterm = self.exits_on_sigterm
        self.children.append(child)
        return child

    async def read_workers(self) -> Sequence[WorkerRow]:
        if self.health_error is not None:
            raise self.health_error
        return list(self.rows.values())

    async def step(self, seconds: float = 0.0) -> int | None:
        self.clock.advance(seconds)
        return await self.manager.run_once()

    def child(self, label: str) -> FakeChild:
        """The most recent process of ``label``."""
        return [c for c in self.children if c.launch.label == label][-1]

    def heartbeat(
        self,
        label: str,
        seconds: float,
        *,
        hostname: str = HOST,
        instance: str | None = INSTANCE,
    ) -> None:
        """The child's worker row, last seen at T0 + seconds (by the database's clock)."""
        pid = self.child(label).pid
        self.rows[pid] = WorkerRow(
            id=uuid4(), hostname=hostname, pid=pid, label=label, workgroup_instance=instance,
            queues=["default"], actors=["echo"], concurrency=4, version=None, started_at=T0,
            last_seen_at=T0 + timedelta(seconds=seconds), stopped_at=None, status="running",
            is_leader=False, running_jobs=0,
        )  # fmt: skip

    def names(self) -> list[str]:
        return [event.name for event in self.events]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [dict(event.fields) for event in self.events if event.name == name]

    def state(self, label: str) -> ChildState:
        return next(s.state for s in self.manager.snapshot() if s.label == label)


# --- spawning -------------------------------------------------------------------------------


async def test_every_child_is_spawned_with_its_label_and_the_group_instance() -> None:
    harness = Harness(make_plan({"api": 2, "media": 1}))
    assert await harness.step() is None
    assert harness.names() == ["workgroup_started"] + ["child_started"] * 3
    assert [c.launch.label for c in harness.children] == ["api-1", "api-2", "media-1"]
    env = harness.child("api-2").launch.env
    assert env["BASE"] == "1"  # the supervisor's environment is inherited ...
    assert env["TASKQ_WORKER_LABEL"] == "api-2"  # ... but the plan's overlay wins
    assert env["TASKQ_WORKGROUP_INSTANCE"] == INSTANCE
    assert harness.of("workgroup_started")[0]["instance"] == INSTANCE
    assert {s.state for s in harness.manager.snapshot()} == {ChildState.RUNNING}


# --- restarts -------------------------------------------------------------------------------

# Scripted histories: (seconds to advance, label to exit with code or None) per step, and the
# events expected after the initial spawn, in order.
HISTORIES = {
    "one crash, restarted after the initial backoff": (
        [(5.0, ("api-1", 1)), (0.5, None), (0.6, None)],
        ["child_exited", "child_restarted"],
    ),
    "crashing young backs off 1s, 2s": (
        [(5.0, ("api-1", 1)), (1.0, None), (0.5, ("api-1", 1)), (1.9, None), (0.2, None)],
        ["child_exited", "child_restarted", "child_exited", "child_restarted"],
    ),
    "more exits than the burst limit give the spec up": (
        [(1.0, ("api-1", 1)), (1.0, None), (0.1, ("api-1", 1)), (2.0, None),
         (0.1, ("api-1", 1)), (4.0, None), (0.1, ("api-1", 1)), (30.0, None)],
        ["child_exited", "child_restarted", "child_exited", "child_restarted",
         "child_exited", "child_restarted", "child_exited", "spec_given_up",
         "workgroup_failed", "workgroup_stopped"],
    ),
    "a clean exit 0 is restarted too when not until-idle": (
        [(40.0, ("api-1", 0)), (1.0, None)],
        ["child_exited", "child_restarted"],
    ),
}  # fmt: skip


@pytest.mark.parametrize(("script", "expected"), HISTORIES.values(), ids=HISTORIES.keys())
async def test_exit_histories_replay_into_the_expected_events(
    script: list[tuple[float, tuple[str, int] | None]], expected: list[str]
) -> None:
    harness = Harness(make_plan({"api": 1}), health=False)
    await harness.step()
    started = len(harness.events)
    for seconds, exit_spec in script:
        if exit_spec is not None:
            harness.child(exit_spec[0]).exit(exit_spec[1])
        await harness.step(seconds)
    assert harness.names()[started:] == expected


async def test_a_killed_child_gets_a_new_pid_after_the_backoff() -> None:
    harness = Harness(make_plan({"api": 2}), health=False)
    await harness.step()
    old = harness.child("api-1")
    old.exit(-signal.SIGKILL)
    await harness.step(60.0)
    (exited,) = harness.of("child_exited")
    assert exited["signal"] == "SIGKILL" and exited["restart_in"] == 1.0
    assert exited["outcome"] == "killed"
    assert harness.state("api-1") is ChildState.BACKOFF
    await harness.step(1.0)
    (restarted,) = harness.of("child_restarted")
    assert restarted == {
        "label": "api-1",
        "spec": "api",
        "pid": harness.child("api-1").pid,
        "previous_pid": old.pid,
        "restarts": 1,
    }
    assert harness.child("api-1").pid != old.pid
    assert harness.child("api-2").signals == []


async def test_a_crash_looping_spec_is_given_up_while_the_others_keep_running() -> None:
    harness = Harness(make_plan({"broken": 2, "api": 1}), health=False)
    await harness.step()
    for _ in range(POLICY.burst_limit + 1):
        harness.child("broken-1").exit(1)
        await harness.step(0.1)
        await harness.step(10.0)  # past any backoff: restarted, unless given up
    (given_up,) = harness.of("spec_given_up")
    assert given_up["spec"] == "broken" and given_up["exits"] == POLICY.burst_limit + 1
    assert given_up["still_running"] == ["broken-2"]
    assert harness.state("broken-1") is ChildState.GIVEN_UP
    assert harness.state("api-1") is ChildState.RUNNING and harness.child("api-1").signals == []
    # The sibling still serving is left alone, but not restarted once it exits.
    harness.child("broken-2").exit(1)
    await harness.step(100.0)
    assert harness.state("broken-2") is ChildState.GIVEN_UP
    assert harness.of("child_exited")[-1]["restart"] is False
    assert len([c for c in harness.children if c.launch.label == "broken-2"]) == 1
    assert harness.manager.exit_code is None  # api keeps the group alive


async def test_when_every_spec_is_given_up_the_group_exits_1() -> None:
    plan = make_plan({"broken": 1}, restart=RestartPolicy(burst_limit=0))
    harness = Harness(plan, health=False)
    await harness.step()
    harness.child("broken-1").exit(1)
    assert await harness.step(0.1) == 1
    assert harness.names()[-3:] == ["spec_given_up", "workgroup_failed", "workgroup_stopped"]


async def test_a_spawn_failure_counts_as_a_crash_and_is_retried() -> None:
    harness = Harness(make_plan({"api": 1}), health=False)
    harness.spawn_error = OSError("fork failed")
    await harness.step()
    assert harness.names()[-2:] == ["child_spawn_failed", "child_exited"]
    assert harness.state("api-1") is ChildState.BACKOFF
    harness.spawn_error = None
    await harness.step(1.0)
    assert harness.names()[-1] == "child_started"
    assert harness.state("api-1") is ChildState.RUNNING


# --- health ---------------------------------------------------------------------------------


async def test_a_stale_heartbeat_gets_the_child_sigkilled_and_restarted() -> None:
    harness = Harness(make_plan({"api": 1, "media": 1}))
    await harness.step()
    for second in range(1, 8):  # both heartbeat every second
        harness.heartbeat("api-1", second)
        harness.heartbeat("media-1", second)
        await harness.step(1.0)
    assert "child_stale_killed" not in harness.names()
    frozen = harness.child("api-1")
    for second in range(8, 15):  # api-1 freezes: its last_seen_at stops moving
        harness.heartbeat("media-1", second)
        await harness.step(1.0)
    (killed,) = harness.of("child_stale_killed")
    assert killed["label"] == "api-1" and killed["pid"] == frozen.pid
    assert killed["registered"] is True and killed["unchanged_for"] > HEALTH.stale_after
    assert frozen.signals == [signal.SIGKILL]
    exited = harness.of("child_exited")[-1]
    assert exited["reason"] == "stale_killed" and exited["signal"] == "SIGKILL"
    await harness.step(1.0)
    assert harness.of("child_restarted")[-1]["previous_pid"] == frozen.pid
    assert harness.child("media-1").signals == []


async def test_a_child_that_never_registers_is_killed_after_the_start_timeout() -> None:
    harness = Harness(make_plan({"api": 1}))
    await harness.step()
    for _ in range(9):
        await harness.step(1.0)
    assert "child_stale_killed" not in harness.names()  # 9s < start_timeout (10s)
    await harness.step(1.5)
    (killed,) = harness.of("child_stale_killed")
    assert killed["registered"] is False and killed["last_seen_at"] is None


async def test_rows_of_another_host_or_instance_are_not_this_childs_heartbeat() -> None:
    harness = Harness(make_plan({"api": 1}))
    await harness.step()
    for second in range(1, 13):
        harness.heartbeat("api-1", second, hostname="host-b")  # same pid, other machine
        await harness.step(1.0)
    assert harness.of("child_stale_killed")[0]["registered"] is False


async def test_an_unreachable_database_gets_nobody_killed() -> None:
    harness = Harness(make_plan({"api": 1}))
    await harness.step()
    harness.heartbeat("api-1", 1)
    await harness.step(1.0)
    harness.health_error = ConnectionError("database down")
    for _ in range(30):
        await harness.step(1.0)
    assert "child_stale_killed" not in harness.names()
    assert harness.of("health_check_failed")[0]["error"] == "database down"
    # Back up, the row has not moved (the worker could not heartbeat either): the child
    # gets a full stale_after from the recovery, not from its last heartbeat.
    harness.health_error = None
    for _ in range(4):
        await harness.step(1.0)
    assert "child_stale_killed" not in harness.names()
    harness.heartbeat("api-1", 40)
    await harness.step(1.0)
    assert "child_stale_killed" not in harness.names()


async def test_health_checks_skip_children_whose_spec_disables_them() -> None:
    plan = make_plan({"api": 1}, health=HealthSettings(enabled=False))
    harness = Harness(plan)
    await harness.step()
    for _ in range(200):
        await harness.step(1.0)
    assert "child_stale_killed" not in harness.names()
    assert harness.manager.next_deadline() is None


async def test_the_last_seen_time_is_exposed_in_the_snapshot() -> None:
    harness = Harness(make_plan({"api": 1}))
    await harness.step()
    harness.heartbeat("api-1", 3)
    await harness.step(1.0)
    (status,) = harness.manager.snapshot()
    assert status.last_seen_at == T0 + timedelta(seconds=3)
    assert status.pid == harness.child("api-1").pid and status.uptime == 1.0


async def test_countdowns_and_deadlines_are_read_on_the_injected_clock() -> None:
    harness = Harness(make_plan({"api": 1}, shutdown_timeout=10.0))
    await harness.step()
    start = harness.clock.monotonic()
    assert harness.manager.next_deadline() == start + HEALTH.check_interval
    harness.child("api-1").exit(1)
    await harness.step(0.5)  # a young crash: restarted after the initial 1s backoff
    (status,) = harness.manager.snapshot()
    assert status.state is ChildState.BACKOFF and status.restart_in == 1.0
    assert harness.manager.next_deadline() == start + 1.5
    harness.clock.advance(0.25)  # no pass: the countdown moves with the clock alone
    assert harness.manager.snapshot()[0].restart_in == 0.75
    await harness.step(0.75)
    assert harness.state("api-1") is ChildState.RUNNING
    harness.clock.advance(2.0)
    assert harness.manager.snapshot()[0].uptime == 2.0
    harness.child("api-1").exits_on_sigterm = False
    harness.manager.request_stop("test")
    assert harness.manager.next_deadline() == harness.clock.monotonic() + 10.0


# --- stopping -------------------------------------------------------------------------------


async def test_a_stop_sends_sigterm_to_every_child_and_the_group_exits_0() -> None:
    harness = Harness(make_plan({"api": 2, "media": 1}))
    await harness.step()
    harness.manager.request_stop("SIGTERM")
    assert all(c.signals == [signal.SIGTERM] for c in harness.children)
    assert await harness.step(0.1) == 0
    assert {e["reason"] for e in harness.of("child_exited")} == {"shutdown"}
    assert "child_restarted" not in harness.names()
    assert harness.names()[-1] == "workgroup_stopped"
    assert harness.of("workgroup_stopped") == [{"exit_code": 0}]


async def test_children_ignoring_sigterm_are_sigkilled_after_the_timeout() -> None:
    harness = Harness(make_plan({"api": 2}, shutdown_timeout=10.0))
    harness.exits_on_sigterm = False
    await harness.step()
    harness.manager.request_stop("SIGTERM")
    # SIGCONT follows SIGTERM so that a stopped (SIGSTOP) child can act on it.
    assert harness.child("api-1").signals == [signal.SIGTERM, signal.SIGCONT]
    harness.child("api-2").exit(0)
    assert await harness.step(9.0) is None
    assert "child_killed" not in harness.names()
    assert await harness.step(1.0) is None  # the deadline passes: SIGKILL, reaped next pass
    (killed,) = harness.of("child_killed")
    assert killed["label"] == "api-1" and killed["reason"] == "shutdown_timeout"
    assert harness.child("api-1").signals[-1] == signal.SIGKILL
    assert await harness.step(0.1) == 0


async def test_a_second_stop_request_forwards_sigterm_again_to_escalate() -> None:
    harness = Harness(make_plan({"api": 1}))
    harness.exits_on_sigterm = False
    await harness.step()
    harness.manager.request_stop("SIGINT")
    harness.manager.request_stop("SIGINT")
    signals = harness.child("api-1").signals
    assert signals.count(signal.SIGTERM) == 2
    assert harness.names()[-2:] == ["workgroup_stopping", "stop_escalated"]


async def test_a_stop_cancels_pending_restarts() -> None:
    harness = Harness(make_plan({"api": 2}), health=False)
    await harness.step()
    harness.child("api-1").exit(1)
    await harness.step(0.1)
    assert harness.state("api-1") is ChildState.BACKOFF
    harness.manager.request_stop("SIGTERM")
    assert await harness.step(5.0) == 0
    assert len(harness.children) == 2


async def test_a_stop_before_the_first_pass_spawns_nothing() -> None:
    harness = Harness(make_plan({"api": 2}))
    harness.manager.request_stop("SIGTERM")
    assert await harness.step() == 0
    assert harness.children == []


async def test_sighup_is_forwarded_to_every_live_child() -> None:
    harness = Harness(make_plan({"api": 2}), health=False)
    await harness.step()
    harness.child("api-2").exit(1)
    await harness.step(0.1)
    harness.manager.forward_signal(signal.SIGHUP)
    assert harness.child("api-1").signals == [signal.SIGHUP]
    assert harness.child("api-2").signals == []
    assert harness.of("signal_forwarded") == [{"signal": "SIGHUP", "children": ["api-1"]}]


# --- until idle -----------------------------------------------------------------------------


async def test_until_idle_the_group_exits_with_the_aggregated_code() -> None:
    harness = Harness(make_plan({"api": 2, "media": 1}, until_idle=True), health=False)
    await harness.step()
    harness.child("api-1").exit(0)
    harness.child("media-1").exit(3)  # some jobs failed for good
    assert await harness.step(1.0) is None
    assert harness.state("api-1") is ChildState.FINISHED
    harness.child("api-2").exit(0)
    assert await harness.step(1.0) == 3
    assert harness.of("workgroup_drained")[0]["children"] == {"api-1": 0, "api-2": 0, "media-1": 3}
    assert "child_restarted" not in harness.names()


async def test_until_idle_a_crashed_child_is_restarted_to_finish_the_batch() -> None:
    harness = Harness(make_plan({"api": 1}, until_idle=True), health=False)
    await harness.step()
    harness.child("api-1").exit(2)  # a watchdog trip is a crash, not an outcome
    await harness.step(0.1)
    await harness.step(1.0)
    assert harness.names()[-1] == "child_restarted"
    harness.child("api-1").exit(0)
    assert await harness.step(0.1) == 0


async def test_until_idle_a_given_up_spec_reports_its_last_exit_code() -> None:
    plan = make_plan({"api": 1, "broken": 1}, until_idle=True, restart=RestartPolicy(burst_limit=0))
    harness = Harness(plan, health=False)
    await harness.step()
    harness.child("broken-1").exit(1)
    harness.child("api-1").exit(0)
    assert await harness.step(0.1) == 1


# --- the loop -------------------------------------------------------------------------------


async def test_run_loops_until_the_group_is_done() -> None:
    harness = Harness(make_plan({"api": 2}), health=False)
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, harness.manager.request_stop, "test")
    code = await asyncio.wait_for(harness.manager.run(install_signal_handlers=False), 5)
    assert code == 0
    assert harness.names()[-1] == "workgroup_stopped"
    assert all(c.signals[0] == signal.SIGTERM for c in harness.children)


async def test_an_error_inside_a_pass_stops_the_group_gracefully() -> None:
    harness = Harness(make_plan({"api": 1}))
    harness.manager._check_health = _raise_once  # type: ignore[method-assign]  # a bug
    code = await asyncio.wait_for(harness.manager.run(install_signal_handlers=False), 5)
    assert code == 0
    assert "supervisor_error" in harness.names()
    assert harness.child("api-1").signals[0] == signal.SIGTERM


async def _raise_once() -> None:
    raise RuntimeError("unexpected")


async def test_last_seen_counts_from_when_the_heartbeat_last_moved_on_the_supervisors_clock() -> (
    None
):
    # The rows' clock (T0, the database's) is not this host's: the age never reads it.
    harness = Harness(make_plan({"api": 1}))
    await harness.step()
    (status,) = harness.manager.snapshot()
    assert status.last_seen_ago is None  # not registered yet
    for second in range(1, 4):
        harness.heartbeat("api-1", second)
        await harness.step(1.0)
    (status,) = harness.manager.snapshot()
    assert status.last_seen_ago == 0.0  # seen moving at this very step
    await harness.step(1.0)
    await harness.step(1.0)  # the row stopped moving two seconds ago
    (status,) = harness.manager.snapshot()
    assert status.last_seen_ago == 2.0
