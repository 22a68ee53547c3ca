"""The supervisor's pure decisions: restart backoff, burst limit, staleness, group exit code."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from taskq_core.supervisor.policy import (
    HeartbeatWatch,
    RestartHistory,
    RestartPolicy,
    decide_restart,
    describe_exit,
    exit_signal,
    group_exit_code,
    is_final_exit,
    is_stale,
    observation_failed,
    observe_heartbeat,
)

POLICY = RestartPolicy(
    backoff_initial=1.0,
    backoff_max=8.0,
    backoff_factor=2.0,
    backoff_reset_after=30.0,
    burst_limit=5,
    burst_window=60.0,
)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def replay(
    exits: list[tuple[float, float]], policy: RestartPolicy = POLICY
) -> list[tuple[bool, float]]:
    """Feed (now, uptime) exits through decide_restart; return (give_up, delay) per exit."""
    history = RestartHistory()
    decisions = []
    for now, uptime in exits:
        decision = decide_restart(policy, history, now=now, uptime=uptime)
        history = decision.history
        decisions.append((decision.give_up, decision.delay))
    return decisions


def test_a_child_dying_young_backs_off_exponentially_up_to_the_cap() -> None:
    decisions = replay([(0.0, 0.5), (2.0, 0.5), (5.0, 0.5), (10.0, 0.5), (20.0, 0.5)])
    assert [delay for _, delay in decisions] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert not any(give_up for give_up, _ in decisions)


def test_a_long_run_resets_the_backoff() -> None:
    decisions = replay([(0.0, 0.5), (2.0, 0.5), (100.0, 45.0), (102.0, 0.5)])
    assert [delay for _, delay in decisions] == [1.0, 2.0, 1.0, 2.0]


def test_the_first_exit_after_a_healthy_run_restarts_after_the_initial_delay() -> None:
    assert replay([(3600.0, 3600.0)]) == [(False, 1.0)]


def test_more_exits_than_the_burst_limit_within_the_window_give_up() -> None:
    decisions = replay([(float(t), 0.1) for t in range(6)])
    assert [give_up for give_up, _ in decisions] == [False] * 5 + [True]


def test_exits_older_than_the_window_do_not_count_towards_the_burst() -> None:
    exits = [(0.0, 0.1), (1.0, 0.1), (2.0, 0.1), (3.0, 0.1), (4.0, 0.1), (70.0, 45.0)]
    decisions = replay(exits)
    assert not any(give_up for give_up, _ in decisions)


def test_young_exits_in_a_row_give_up_even_when_the_backoff_spreads_them_out() -> None:
    # Each run dies within seconds, but the growing delays put fewer than the limit in any
    # 60s window: without the in-a-row rule this crash loop would go on forever.
    now, exits = 0.0, []
    for _ in range(6):
        now += 50.0
        exits.append((now, 5.0))
    decisions = replay(exits)
    assert [give_up for give_up, _ in decisions] == [False] * 5 + [True]


def test_a_long_run_breaks_the_young_exit_streak() -> None:
    exits = [(t * 50.0, 5.0) for t in range(1, 6)] + [(400.0, 100.0), (450.0, 5.0)]
    decisions = replay(exits)
    assert not any(give_up for give_up, _ in decisions)


def test_a_burst_limit_of_zero_gives_up_on_the_first_exit() -> None:
    policy = RestartPolicy(burst_limit=0)
    assert replay([(0.0, 100.0)], policy)[0][0] is True


def test_the_decision_reports_how_many_exits_fell_in_the_window() -> None:
    history = RestartHistory(exits=(0.0, 50.0))
    decision = decide_restart(POLICY, history, now=65.0, uptime=1.0)
    assert decision.exits_in_window == 2  # the exit at 0.0 left the 60s window
    assert decision.history.exits == (50.0, 65.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"backoff_initial": 0},
        {"backoff_initial": 5, "backoff_max": 1},
        {"backoff_factor": 0.5},
        {"burst_window": 0},
        {"burst_limit": -1},
    ],
)
def test_an_inconsistent_policy_is_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RestartPolicy(**kwargs)  # type: ignore[arg-type]


def test_an_unregistered_child_is_stale_only_after_the_start_timeout() -> None:
    watch = HeartbeatWatch.spawned(100.0)
    watch = observe_heartbeat(watch, None, now=120.0)
    assert not is_stale(watch, now=120.0, stale_after=5.0, start_timeout=30.0)
    assert is_stale(watch, now=131.0, stale_after=5.0, start_timeout=30.0)


def test_a_moving_heartbeat_is_never_stale() -> None:
    watch = HeartbeatWatch.spawned(0.0)
    for tick in range(1, 20):
        watch = observe_heartbeat(watch, T0 + timedelta(seconds=tick), now=float(tick * 2))
        assert not is_stale(watch, now=float(tick * 2), stale_after=3.0, start_timeout=60.0)


def test_a_heartbeat_that_stops_moving_goes_stale_after_stale_after() -> None:
    watch = observe_heartbeat(HeartbeatWatch.spawned(0.0), T0, now=1.0)
    for now in (2.0, 3.0, 4.0):
        watch = observe_heartbeat(watch, T0, now=now)
    assert watch.moved_at == 1.0
    assert not is_stale(watch, now=4.0, stale_after=3.0, start_timeout=60.0)
    assert is_stale(watch, now=4.5, stale_after=3.0, start_timeout=60.0)


def test_staleness_ignores_how_far_the_database_clock_is_from_ours() -> None:
    # A database clock a day behind: the timestamp moves, so the child is alive.
    skewed = T0 - timedelta(days=1)
    watch = observe_heartbeat(HeartbeatWatch.spawned(0.0), skewed, now=1.0)
    watch = observe_heartbeat(watch, skewed + timedelta(seconds=1), now=2.0)
    assert not is_stale(watch, now=2.5, stale_after=1.0, start_timeout=60.0)


def test_a_failed_observation_restarts_the_staleness_clock() -> None:
    watch = observe_heartbeat(HeartbeatWatch.spawned(0.0), T0, now=1.0)
    watch = observation_failed(watch, now=100.0)  # database unreachable meanwhile
    assert not is_stale(watch, now=102.0, stale_after=3.0, start_timeout=60.0)
    watch = observe_heartbeat(watch, T0, now=104.0)
    assert is_stale(watch, now=104.0, stale_after=3.0, start_timeout=60.0)


@pytest.mark.parametrize(
    ("code", "until_idle", "final"),
    [(0, True, True), (3, True, True), (4, True, True), (1, True, False), (2, True, False),
     (-9, True, False), (0, False, False), (3, False, False)],
)  # fmt: skip
def test_only_until_idle_outcomes_end_a_child_for_good(
    code: int, until_idle: bool, final: bool
) -> None:
    assert is_final_exit(code, until_idle=until_idle) is final


@pytest.mark.parametrize(
    ("codes", "expected"),
    [([0, 0, 0], 0), ([0, 3, 0], 3), ([4, 3], 3), ([0, 4, 1], 4), ([0, 1, 4], 1), ([-9, 0], 1)],
)
def test_the_group_exit_code_prefers_failures_then_the_first_non_zero(
    codes: list[int], expected: int
) -> None:
    assert group_exit_code(codes) == expected


@pytest.mark.parametrize(
    ("code", "outcome"),
    [(0, "clean"), (1, "error"), (2, "watchdog_trip"), (3, "jobs_failed"),
     (4, "idle_max_runtime"), (-9, "killed"), (77, "error")],
)  # fmt: skip
def test_worker_exit_codes_are_described_in_words(code: int, outcome: str) -> None:
    assert describe_exit(code) == outcome


@pytest.mark.parametrize(
    ("code", "name"),
    [(None, None), (0, None), (1, None), (-9, "SIGKILL"), (-15, "SIGTERM"), (-200, "signal 200")],
)
def test_a_death_by_signal_is_named_by_its_signal(code: int | None, name: str | None) -> None:
    assert exit_signal(code) == name
