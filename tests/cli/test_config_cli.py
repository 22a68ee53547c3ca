"""`taskq config`: every effective setting with the source that won (flag over environment
over `.env` over default), secrets masked, as a table and as one JSON document."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
from typer.testing import CliRunner, Result

from taskq_cli.commands import config
from taskq_cli.options import GlobalOptions
from taskq_core.errors import ConfigError
from taskq_core.settings import TaskqSettings
from tests.cli.conftest import one_error_line

app = typer.Typer()
app.command("config")(config.config)


@app.callback()
def root(
    ctx: typer.Context,
    dsn: Annotated[str | None, typer.Option("--dsn")] = None,
    schema: Annotated[str | None, typer.Option("--schema")] = None,
) -> None:
    """The real root's global options, as `taskq --dsn ... config` gives them."""
    ctx.obj = GlobalOptions(dsn=dsn, schema=schema)


@pytest.fixture
def workdir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A directory without `.env` and an environment without TASKQ_* variables."""
    for key in list(os.environ):
        if key.upper().startswith("TASKQ_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def settings_document(*args: str) -> dict[str, Any]:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, (result.output, result.exception)
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_every_setting_is_listed_with_its_source(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workdir / ".env").write_text(
        "TASKQ_SCHEMA_NAME=from_file\nTASKQ_MAX_CONCURRENCY=3\nTASKQ_LOG_FORMAT=console\n"
    )
    monkeypatch.setenv("TASKQ_MAX_CONCURRENCY", "5")
    monkeypatch.setenv("TASKQ_QUEUES", "media,mail")
    document = settings_document("config", "--dsn", "embedded:here")
    settings = document["settings"]
    assert list(settings) == ["TASKQ_" + name.upper() for name in TaskqSettings.model_fields]
    assert settings["TASKQ_PG_DSN"] == {"value": "embedded:here", "source": "flag"}
    assert settings["TASKQ_MAX_CONCURRENCY"] == {"value": 5, "source": "environment"}
    assert settings["TASKQ_QUEUES"] == {"value": ["media", "mail"], "source": "environment"}
    assert settings["TASKQ_SCHEMA_NAME"] == {"value": "from_file", "source": ".env"}
    assert settings["TASKQ_LOG_FORMAT"] == {"value": "console", "source": ".env"}
    assert settings["TASKQ_HEARTBEAT_INTERVAL"] == {"value": 10.0, "source": "default"}
    assert settings["TASKQ_PREFETCH"] == {"value": None, "source": "default"}
    assert document["env_file"] == str((workdir / ".env").resolve())


def test_root_flags_count_as_flags_and_win_over_the_environment(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKQ_SCHEMA_NAME", "from_env")
    settings = settings_document("--schema", "from_root", "config")["settings"]
    assert settings["TASKQ_SCHEMA_NAME"] == {"value": "from_root", "source": "flag"}
    # The subcommand's own flag wins over the root's, as in every command.
    settings = settings_document("--schema", "from_root", "config", "--schema", "mine")["settings"]
    assert settings["TASKQ_SCHEMA_NAME"] == {"value": "mine", "source": "flag"}


def test_passwords_in_dsns_and_urls_are_masked(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKQ_PG_DSN", "postgresql://app:hunter2@db1,db2/jobs?sslmode=require")
    monkeypatch.setenv("TASKQ_PG_DSN_DIRECT", "postgresql://app@db1/jobs?password=hunter2")
    monkeypatch.setenv("TASKQ_REDIS_URL", "redis://:hunter2@cache:6379/0")
    result = invoke("config", "--json")
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.stdout
    settings = json.loads(result.stdout)["settings"]
    assert settings["TASKQ_PG_DSN"]["value"] == "postgresql://app:***@db1,db2/jobs?sslmode=require"
    assert settings["TASKQ_PG_DSN_DIRECT"]["value"] == "postgresql://app@db1/jobs?password=***"
    assert settings["TASKQ_REDIS_URL"]["value"] == "redis://:***@cache:6379/0"
    table = invoke("config")
    assert table.exit_code == 0, table.output
    assert "hunter2" not in table.output
    assert "postgresql://app:***@db1,db2/jobs?sslmode=require" in table.stdout


def test_a_setting_named_as_a_secret_is_masked_whole() -> None:
    assert config.mask("admin_token", "abc123") == ("***", True)
    assert config.mask("admin_token", None) == (None, False)
    assert config.mask("admin_url", "http://localhost:8080") == ("http://localhost:8080", False)


def test_the_table_shows_values_as_they_are_written(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKQ_LOCK_LEASE", "PT2M")
    result = invoke("config")
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:]}
    assert lines["TASKQ_LOCK_LEASE"] == ["2m", "environment"]
    assert lines["TASKQ_PRUNE_RETENTION_FAILED"] == ["90d", "default"]
    assert lines["TASKQ_NOTIFY_ENABLED"] == ["true", "default"]
    assert lines["TASKQ_QUEUES"] == ["default", "default"]
    assert lines["TASKQ_PREFETCH"] == ["-", "default"]
    assert ".env: none in this directory" in result.stderr


def test_an_invalid_setting_is_the_usual_one_line_error(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKQ_MAX_CONCURRENCY", "many")
    result = invoke("config")
    assert isinstance(result.exception, ConfigError)
    assert "TASKQ_MAX_CONCURRENCY" in str(result.exception)


def test_through_the_taskq_command(taskq_cli: Any) -> None:
    result = taskq_cli("--dsn", "postgresql://app:hunter2@db/jobs", "config", "--json")
    assert result.exit_code == 0, result.stderr
    settings = json.loads(result.stdout)["settings"]
    assert settings["TASKQ_PG_DSN"] == {"value": "postgresql://app:***@db/jobs", "source": "flag"}
    broken = taskq_cli("config", env={"TASKQ_MAX_CONCURRENCY": "many"})
    assert one_error_line(broken).startswith("error: invalid setting TASKQ_MAX_CONCURRENCY")
