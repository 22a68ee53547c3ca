"""``@cron``: stacked above ``@actor``, checked when the module is imported."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from taskq_core import actor, cron
from taskq_core.actors import ActorRef
from taskq_core.backend.protocol import ScheduleSpec
from taskq_core.cron_schedules import declared_schedules
from taskq_core.errors import ConfigError


class Report(BaseModel):
    full: bool
    region: str = "eu"


@cron("*/15  *  * * *", name="refresh-rates", payload={"full": False})
@cron("0 3 * * *", timezone="Europe/Berlin", payload={"full": True}, queue="nightly")
@actor(queue="reports")
async def build_report(payload: Report) -> None:
    """Stacked twice: the default name (the actor's) and a named one."""


def test_cron_stacks_above_actor_and_keeps_it_an_actor() -> None:
    assert isinstance(build_report, ActorRef)
    assert build_report.name == "build_report" and build_report.queue == "reports"
    assert build_report.schedules == (
        # Applied bottom-up, as decorators are: the one next to @actor first.
        ScheduleSpec(
            name="build_report",  # the default name is the actor's
            actor="build_report",
            cron="0 3 * * *",
            timezone="Europe/Berlin",
            payload={"full": True, "region": "eu"},  # as the actor's model stores it
            queue="nightly",
        ),
        ScheduleSpec(
            name="refresh-rates",
            actor="build_report",
            cron="*/15 * * * *",  # whitespace normalized
            timezone="UTC",
            payload={"full": False, "region": "eu"},
            queue=None,
        ),
    )
    assert [spec.name for spec in declared_schedules([build_report])] == [
        "build_report",
        "refresh-rates",
    ]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"expression": "* * *"}, r"expression: expected a 5-field cron expression"),
        ({"expression": "61 * * * *"}, r"expression: not a valid cron expression"),
        ({"expression": "* * * * *", "timezone": "Mars/Olympus"}, r"timezone: unknown timezone"),
        ({"expression": "* * * * *", "payload": {"full": "maybe"}}, r"payload: .*full"),
        ({"expression": "* * * * *", "name": " "}, r"name: ' ' is not a valid schedule name"),
    ],
)
def test_a_bad_declaration_fails_at_import_naming_the_field(
    arguments: dict[str, Any], message: str
) -> None:
    expression = arguments.pop("expression")
    with pytest.raises(ConfigError, match=r"@cron '.*' on actor 'typed': " + message):

        @cron(expression, **arguments)
        @actor
        async def typed(payload: Report) -> None: ...


def test_a_plain_dict_actor_takes_any_object_payload_and_stores_none_as_empty() -> None:
    @cron("0 * * * *")
    @actor
    async def hourly(payload: dict[str, Any]) -> None: ...

    assert hourly.schedules[0].payload == {}


def test_two_schedules_of_one_name_are_refused() -> None:
    with pytest.raises(ConfigError, match="give each @cron its own name="):

        @cron("0 * * * *")
        @cron("30 * * * *")
        @actor
        async def twice(payload: dict[str, Any]) -> None: ...


def test_two_actors_declaring_one_schedule_name_are_refused_by_the_registry() -> None:
    @cron("0 * * * *", name="shared")
    @actor
    async def first(payload: dict[str, Any]) -> None: ...

    @cron("0 * * * *", name="shared")
    @actor
    async def second(payload: dict[str, Any]) -> None: ...

    with pytest.raises(ConfigError, match=r"'first' and 'second' both declare .*'shared'"):
        declared_schedules([first, second])


def test_cron_below_actor_is_a_clear_mistake() -> None:
    with pytest.raises(TypeError, match="@cron goes above @actor"):

        @actor
        @cron("0 * * * *")  # type: ignore[arg-type]
        async def upside_down(payload: dict[str, Any]) -> None: ...
