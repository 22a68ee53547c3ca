"""docs/settings.md: the committed reference is what TaskqSettings generates, and it is true.

The drift check regenerates the text from the model, as tests/cli/test_completions.py does
for the shell scripts. The reference's defaults are checked by use: written as their
variables, they load as the defaults; and exactly the settings a worker ignores are marked.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from taskq_core.settings import ENV_PREFIX, NOT_YET_IN_EFFECT, TaskqSettings

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "scripts" / "gen_settings_doc.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_settings_doc", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while being made
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    return _generator()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for key in list(os.environ):
        if key.startswith(ENV_PREFIX):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # no .env
    return monkeypatch


def test_the_committed_reference_matches_the_settings(generator: ModuleType) -> None:
    committed = (ROOT / "docs" / "settings.md").read_text()
    assert committed == generator.render(), (
        "docs/settings.md drifted from TaskqSettings: run `make settings-doc`"
    )


def test_the_generator_check_mode_agrees() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_every_setting_has_one_row(generator: ModuleType) -> None:
    names = [row.name for _, rows in generator.rows() for row in rows]
    assert sorted(names) == sorted(TaskqSettings.model_fields)
    text = (ROOT / "docs" / "settings.md").read_text()
    for name in names:
        assert text.count(f"| `{ENV_PREFIX}{name.upper()}` |") == 1, name


def test_each_documented_default_loads_as_the_default(
    generator: ModuleType, clean_env: pytest.MonkeyPatch
) -> None:
    defaults = TaskqSettings.load().model_dump()
    rows = [row for _, group in generator.rows() for row in group]
    for row in rows:
        if row.default_text is not None:
            clean_env.setenv(row.variable, row.default_text)
    assert TaskqSettings.load().model_fields_set == {r.name for r in rows if r.default_text}
    assert TaskqSettings.load().model_dump() == defaults
    assert {row.name for row in rows if row.default_text is None} == {
        name for name, field in TaskqSettings.model_fields.items() if field.default is None
    }


def test_durations_read_the_way_an_operator_writes_them(generator: ModuleType) -> None:
    documented = {row.name: row.default_text for _, rows in generator.rows() for row in rows}
    assert documented["sweep_interval"] == "30s"
    assert documented["pool_max_inactive_lifetime"] == "5m"
    assert documented["health_pg_ping_timeout"] == "200ms"
    assert documented["prune_retention_failed"] == "90d"
    assert documented["queues"] == "default"
    assert documented["notify_enabled"] == "true"


def test_exactly_the_settings_a_worker_ignores_are_marked(generator: ModuleType) -> None:
    rows = [row for _, group in generator.rows() for row in group]
    marked = {row.name: row.waits_for for row in rows if row.waits_for is not None}
    assert marked == NOT_YET_IN_EFFECT
    text = (ROOT / "docs" / "settings.md").read_text()
    for row in rows:
        line = next(line for line in text.splitlines() if line.startswith(f"| `{row.variable}` |"))
        assert ("**Not yet in effect**" in line) == (row.name in NOT_YET_IN_EFFECT), line
