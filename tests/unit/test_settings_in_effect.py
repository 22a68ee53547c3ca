"""Every setting does something: each one is read by the code, or is listed as not in effect
yet (and a worker warns when it is set)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from taskq_core.settings import NOT_YET_IN_EFFECT, TaskqSettings, settings_not_in_effect

ROOT = Path(__file__).resolve().parents[2]


# Read through a property of TaskqSettings (inside settings.py), which the code reads.
_THROUGH_PROPERTIES = {"prefetch": "effective_prefetch", "pg_dsn_direct": "direct_dsn"}


def _sources() -> str:
    files = [*ROOT.glob("taskq_core/**/*.py"), *ROOT.glob("taskq_cli/**/*.py")]
    return "\n".join(p.read_text() for p in files if p.name != "settings.py")


def test_the_not_in_effect_list_names_real_settings() -> None:
    assert set(NOT_YET_IN_EFFECT) <= set(TaskqSettings.model_fields)
    for prop in _THROUGH_PROPERTIES.values():
        assert re.search(rf"\.{prop}\b", _sources()), prop


@pytest.mark.parametrize(
    "name",
    sorted(set(TaskqSettings.model_fields) - set(NOT_YET_IN_EFFECT) - set(_THROUGH_PROPERTIES)),
)
def test_every_other_setting_is_read_by_the_code(name: str) -> None:
    assert re.search(rf"\.{name}\b", _sources()), f"nothing reads TASKQ_{name.upper()}"


def test_a_set_setting_that_nothing_reads_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKQ_PRUNE_RETENTION_FAILED", "7d")
    monkeypatch.setenv("TASKQ_MAX_CONCURRENCY", "3")
    assert settings_not_in_effect(TaskqSettings.load()) == {
        "TASKQ_PRUNE_RETENTION_FAILED": "retention"
    }
