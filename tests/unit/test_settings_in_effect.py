"""Every setting does something: each one is read by the code, or is listed as not in effect
yet (and a worker warns when it is set)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from taskq_core.retention import FALLBACK_SETTING, RETENTION_SETTING
from taskq_core.settings import NOT_YET_IN_EFFECT, TaskqSettings, settings_not_in_effect

ROOT = Path(__file__).resolve().parents[2]


# Read through a property of TaskqSettings (inside settings.py), which the code reads.
_THROUGH_PROPERTIES = {
    "prefetch": "effective_prefetch",
    "pg_dsn_direct": "direct_dsn",
    "pg_dsn_pooled": "pooled_dsn",
}
# Read by name: retention.retention_for picks each status's setting from RETENTION_SETTING
# (tests/worker/test_retention_settings.py shows each one moving jobs).
_BY_NAME = {*RETENTION_SETTING.values(), FALLBACK_SETTING}


def _sources() -> str:
    files = [*ROOT.glob("taskq_core/**/*.py"), *ROOT.glob("taskq_cli/**/*.py")]
    return "\n".join(p.read_text() for p in files if p.name != "settings.py")


def test_the_not_in_effect_list_names_real_settings() -> None:
    assert set(NOT_YET_IN_EFFECT) <= set(TaskqSettings.model_fields)
    for prop in _THROUGH_PROPERTIES.values():
        assert re.search(rf"\.{prop}\b", _sources()), prop


@pytest.mark.parametrize(
    "name",
    sorted(
        set(TaskqSettings.model_fields)
        - set(NOT_YET_IN_EFFECT)
        - set(_THROUGH_PROPERTIES)
        - _BY_NAME
    ),
)
def test_every_other_setting_is_read_by_the_code(name: str) -> None:
    assert re.search(rf"\.{name}\b", _sources()), f"nothing reads TASKQ_{name.upper()}"


def test_the_settings_read_by_name_are_real_settings() -> None:
    assert _BY_NAME <= set(TaskqSettings.model_fields)


def test_a_set_setting_that_nothing_reads_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    # No setting waits for its subsystem today: one is made to, as the next one would be.
    monkeypatch.setitem(NOT_YET_IN_EFFECT, "dispatch_oversample", "a subsystem to come")
    monkeypatch.setenv("TASKQ_DISPATCH_OVERSAMPLE", "3")
    monkeypatch.setenv("TASKQ_PRUNE_RETENTION_FAILED", "7d")  # in effect: not reported
    assert settings_not_in_effect(TaskqSettings.load()) == {
        "TASKQ_DISPATCH_OVERSAMPLE": "a subsystem to come"
    }
