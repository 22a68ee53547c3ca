"""The limits pane of `taskq top`: hidden while no limit is declared; once workers declared
some, each limit instance with its rule and its use now, coloured when used up; limits kept
in Redis read there when top can reach it, else shown as unknown."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from uuid import uuid4

from textual.widgets import DataTable

from taskq_cli.dashboard.filters import JobsFilter
from taskq_cli.dashboard.source import BackendSource
from taskq_core.backend.protocol import LimitDefinition, LimitUsage
from tests.tui.conftest import WIDE, Dashboard, settle, top_app

API = LimitDefinition("api", "token_bucket", 4.0, per_second=0.5)
GPU = LimitDefinition("gpu", "reservation", 2.0)
SMS = LimitDefinition("sms", "sliding_window", 3.0, span=timedelta(minutes=1), keyed=True)
REMOTE = LimitDefinition("remote", "token_bucket", 10.0, per_second=10.0, store="redis")


def rows(table: DataTable[Any]) -> dict[str, list[str]]:
    return {
        str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)]
        for i in range(table.row_count)
    }


async def test_the_limits_pane_is_hidden_while_no_limit_is_declared(
    dashboard: Dashboard,
) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        assert not app.limits_pane.has_class("-visible")
        assert not app.limits_pane.display


async def test_each_limit_instance_shows_its_rule_and_its_use(dashboard: Dashboard) -> None:
    backend = dashboard.backend
    await backend.register_rate_limits([API, GPU, SMS])
    for _ in range(4):
        assert (await backend.acquire_token("api", 0.5, 4.0)).allowed
    assert (await backend.acquire_window("sms:tenant-a", 3, timedelta(minutes=1))).allowed
    assert await backend.acquire_reservation("gpu", 2, uuid4(), uuid4(), timedelta(minutes=1))
    app = top_app(dashboard.source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        assert app.limits_pane.display
        assert app.limits_pane.border_title == "Limits · 3 · 1 used up"
        shown = rows(app.limits_table)
        assert shown["api"][1:4] == ["token bucket 0.5/s, burst 4", "4 of 4 tokens", "█" * 10]
        assert shown["gpu"][1:3] == ["2 slots", "1 of 2 slots"]
        assert shown["sms:tenant-a"][1:3] == ["window 3 per 1m per key", "1 of 3 uses"]
        dashboard.clock.advance(4)  # two tokens come back
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert rows(app.limits_table)["api"][2] == "2 of 4 tokens"


class FakeRedis:
    """Stands in for RedisLimiterStore.usage: what the workers' Redis holds."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def usage(
        self, limits: Sequence[LimitDefinition], instances_per_limit: int = 20
    ) -> list[LimitUsage]:
        if self.fail:
            raise ConnectionError("redis is away")
        return [LimitUsage(limit, f"{limit.name}", 7.0) for limit in limits]


async def test_limits_kept_in_redis_are_read_there_or_shown_unknown(
    dashboard: Dashboard,
) -> None:
    await dashboard.backend.register_rate_limits([API, REMOTE])
    backend, source = dashboard.backend, dashboard.source
    plain = await source.snapshot(JobsFilter())
    assert {u.instance: u.used for u in plain.limits} == {"api": 0.0, "remote": None}
    reading = BackendSource(backend, "db", "public", limit_store=FakeRedis())
    read = await reading.snapshot(JobsFilter())
    assert {u.instance: u.used for u in read.limits} == {"api": 0.0, "remote": 7.0}
    failing = BackendSource(backend, "db", "public", limit_store=FakeRedis(fail=True))
    away = await failing.snapshot(JobsFilter())
    assert {u.instance: u.used for u in away.limits} == {"api": 0.0, "remote": None}
    app = top_app(source)
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        assert rows(app.limits_table)["remote"][2] == "in Redis"
