"""Secrets never echoed (issue 33): a value that fails validation is described, not repeated,
when its setting holds or may hold a credential.

A matrix of bad values, each carrying a password, goes through every way a value arrives (the
environment, ``.env``, ``--dsn`` on ``taskq`` and on the command, a workgroup file's ``env``
table) into ``config``, ``migrate up``/``status``, ``worker``, ``ui serve`` and ``workgroup
check``: the password appears 0 times on stdout and stderr (``--json`` too), while the one
error line still names the setting and says what is wrong. A few runs are real processes;
the rest run the CLI in-process, as tests/cli does.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import one_error_line
from tests.conftest import TASKQ_BIN, PgTarget

PASSWORD = "Kw7PzSecret"

# Every form a DSN takes, broken the ways people break them, each with the password in it.
BAD_DSNS = {
    "typo-scheme": f"postgress://postgres:{PASSWORD}@127.0.0.1:5432/app",
    "keyword-value": f"host=127.0.0.1 user=postgres password={PASSWORD} dbname=app",
    "keyword-value-quoted": f"host=127.0.0.1 password='{PASSWORD} x' dbname=app",
    "at-in-password": f"postgresql://postgres:{PASSWORD}@x@127.0.0.1/app",
    "slash-in-password": f"postgresql://postgres:{PASSWORD}/x@127.0.0.1/app",
    "question-in-password": f"postgresql://postgres:{PASSWORD}?x@127.0.0.1/app",
    "hash-in-password": f"postgresql://postgres:{PASSWORD}#x@127.0.0.1/app",
    "port-out-of-range": f"postgresql://postgres:{PASSWORD}@127.0.0.1:99999/app",
    "multi-host-bad-port": (
        f"postgresql://postgres:{PASSWORD}@h1:5432,h2:x/app?target_session_attrs=read-write"
    ),
    "password-in-broken-query": f"postgresql://127.0.0.1/app?password={PASSWORD}&sslmode",
    "unclosed-ipv6": f"postgresql://postgres:{PASSWORD}@[::1/app",
    "typo-embedded": f"embeded:/srv/pgdata?password={PASSWORD}",
    "password-alone": PASSWORD,
}
BAD_REDIS_URLS = {
    "port-not-a-number": f"redis://:{PASSWORD}@cache:port/0",
    "slash-in-password": f"redis://:{PASSWORD}/x@cache:6379/0",
    "typo-scheme": f"redis:/:{PASSWORD}@cache:6379/0",
    "http-scheme": f"http://:{PASSWORD}@cache:6379/0",
}
# A valid DSN no server answers: a run that got past its settings would fail to connect.
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/app"
DSN_VARIABLES = ("TASKQ_PG_DSN", "TASKQ_PG_DSN_DIRECT", "TASKQ_PG_DSN_POOLED")
# Every command of the issue, with arguments that get it as far as its settings.
COMMANDS = {
    "config": ("config",),
    "config-json": ("config", "--json"),
    "migrate-up": ("migrate", "up"),
    "migrate-status": ("migrate", "status"),
    "worker": ("worker", "--actors", "tests.e2e.e2e_actors:registry", "--until-idle"),
    "ui-serve": ("ui", "serve"),
}
WORKGROUP = """\
actors = "tests.e2e.e2e_actors:registry"

[[workers]]
name = "main"
queues = ["default"]
"""


def assert_not_echoed(result: Any, variable: str, reason: str) -> str:
    """The failure contract, 0 occurrences of the password, and an error that names the
    setting and says why; returns the error line."""
    line = one_error_line(result)
    assert result.stdout.count(PASSWORD) == 0, result.stdout
    assert result.stderr.count(PASSWORD) == 0, result.stderr
    assert variable in line, line
    assert reason in line, line
    return line


@pytest.fixture
def workdir(taskq_cli: Any, tmp_path: Path) -> Path:
    """The directory the in-process CLI runs in (``taskq_cli`` cleared TASKQ_*)."""
    return tmp_path


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("variable", DSN_VARIABLES)
@pytest.mark.parametrize("form", list(BAD_DSNS))
def test_a_bad_dsn_in_the_environment_is_described_not_repeated(
    taskq_cli: Any, form: str, variable: str, command: str
) -> None:
    env = {variable: BAD_DSNS[form]}
    if variable != "TASKQ_PG_DSN":
        env["TASKQ_PG_DSN"] = UNREACHABLE
    result = taskq_cli(*COMMANDS[command], env=env)
    assert_not_echoed(result, variable, "expected postgresql://")


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("form", list(BAD_DSNS))
def test_a_bad_dsn_flag_is_described_not_repeated(taskq_cli: Any, form: str, command: str) -> None:
    # The error names the flag the value came from, not the variable.
    root = taskq_cli("--dsn", BAD_DSNS[form], *COMMANDS[command])
    assert_not_echoed(root, "invalid value of --dsn", "expected postgresql://")
    if command != "config-json":  # the flag after the command name, too
        own = taskq_cli(*COMMANDS[command], "--dsn", BAD_DSNS[form])
        assert_not_echoed(own, "invalid value of --dsn", "expected postgresql://")


@pytest.mark.parametrize("form", ["keyword-value", "typo-scheme", "slash-in-password"])
def test_a_bad_dsn_in_dot_env_is_described_not_repeated(
    taskq_cli: Any, workdir: Path, form: str
) -> None:
    (workdir / ".env").write_text(f"TASKQ_PG_DSN={BAD_DSNS[form]}\n")
    for command in ("config", "migrate-status"):
        assert_not_echoed(taskq_cli(*COMMANDS[command]), "TASKQ_PG_DSN", "expected postgresql://")


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("form", list(BAD_REDIS_URLS))
def test_a_bad_redis_url_is_described_not_repeated(taskq_cli: Any, form: str, command: str) -> None:
    env = {"TASKQ_REDIS_URL": BAD_REDIS_URLS[form], "TASKQ_PG_DSN": UNREACHABLE}
    result = taskq_cli(*COMMANDS[command], env=env)
    assert_not_echoed(result, "TASKQ_REDIS_URL", "expected redis://")


@pytest.mark.parametrize(
    "variable",
    ["TASKQ_SCHEMA_NAME", "TASKQ_SWEEP_INTERVAL", "TASKQ_LOG_LEVEL", "TASKQ_PRUNE_SCHEDULE_UTC"],
)
@pytest.mark.parametrize(
    "value",
    [f"postgresql://postgres:{PASSWORD}@db/app", f"host=db password={PASSWORD}"],
    ids=["url", "keyword-value"],
)
def test_a_dsn_pasted_into_another_setting_is_shown_masked(
    taskq_cli: Any, variable: str, value: str
) -> None:
    """A setting that holds no credential quotes what it rejected, but masked and bounded:
    a DSN pasted into the wrong variable keeps its password."""
    result = taskq_cli("config", env={variable: value})
    line = assert_not_echoed(result, variable, "***")
    assert "(got " in line


def test_a_long_rejected_value_is_shown_bounded(taskq_cli: Any) -> None:
    result = taskq_cli("config", env={"TASKQ_SWEEP_INTERVAL": "y" * 5000})
    line = one_error_line(result)
    assert "(5000 characters)" in line and len(line) < 400, line


def test_a_rejected_admin_token_is_described_not_repeated(taskq_cli: Any, pg: PgTarget) -> None:
    result = taskq_cli("ui", "serve", env=pg.env(TASKQ_ADMIN_TOKEN=PASSWORD))
    line = assert_not_echoed(result, "TASKQ_ADMIN_TOKEN", "characters")
    assert str(len(PASSWORD)) in line


@pytest.mark.parametrize("form", ["typo-scheme", "keyword-value", "at-in-password"])
@pytest.mark.parametrize("json_output", [False, True])
def test_a_bad_dsn_in_a_workgroup_env_table_is_described_not_repeated(
    taskq_cli: Any, workdir: Path, form: str, json_output: bool
) -> None:
    dsn = json.dumps(BAD_DSNS[form])  # a TOML basic string is a JSON string
    (workdir / "group.toml").write_text(f"{WORKGROUP}env = {{ TASKQ_PG_DSN = {dsn} }}\n")
    extra = ("--json",) if json_output else ()
    result = taskq_cli("workgroup", "check", "group.toml", *extra)
    line = assert_not_echoed(result, "workers[0].env.TASKQ_PG_DSN", "expected postgresql://")
    assert line.startswith("error: group.toml: ")


@pytest.mark.parametrize("form", ["typo-scheme", "keyword-value"])
def test_a_bad_dsn_in_the_supervisors_environment_is_described_not_repeated(
    taskq_cli: Any, workdir: Path, form: str
) -> None:
    (workdir / "group.toml").write_text(WORKGROUP)
    result = taskq_cli("workgroup", "check", "group.toml", env={"TASKQ_PG_DSN": BAD_DSNS[form]})
    assert_not_echoed(result, "TASKQ_PG_DSN", "expected postgresql://")


@pytest.mark.parametrize("json_output", [False, True])
def test_a_workgroup_plan_masks_every_credential_its_env_tables_hold(
    taskq_cli: Any, workdir: Path, json_output: bool
) -> None:
    (workdir / "group.toml").write_text(
        WORKGROUP
        + "[workers.env]\n"
        + f'TASKQ_PG_DSN = "postgresql://app:{PASSWORD}@db1,db2/jobs"\n'
        + f'TASKQ_REDIS_URL = "redis://:{PASSWORD}@cache:6379/0"\n'
        + f'OTEL_EXPORTER_OTLP_HEADERS = "authorization=Bearer {PASSWORD}"\n'
        + f'DATABASE_URL = "postgres://app:{PASSWORD}@db/other"\n'
        + f'LEGACY_DSN = "host=db password={PASSWORD}"\n'
    )
    extra = ("--json",) if json_output else ()
    result = taskq_cli("workgroup", "check", "group.toml", "--no-import", *extra)
    assert result.exit_code == 0, result.stderr
    assert (result.stdout + result.stderr).count(PASSWORD) == 0, result.stdout
    shown = json.loads(result.stdout)["children"][0]["env"] if json_output else result.stdout
    for expected in ("postgresql://app:***@db1,db2/jobs", "redis://:***@cache:6379/0"):
        assert expected in (shown.values() if json_output else shown), shown


def test_a_connection_failure_names_the_server_not_the_password(taskq_cli: Any) -> None:
    dsn = f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/app"
    for command in ("migrate-status", "migrate-up"):
        result = taskq_cli(*COMMANDS[command], env={"TASKQ_PG_DSN": dsn})
        line = one_error_line(result)
        assert PASSWORD not in result.stdout + result.stderr
        assert "127.0.0.1:1/app" in line


@pytest.mark.parametrize("form", ["typo-scheme", "keyword-value", "port-out-of-range"])
@pytest.mark.parametrize("command", ["worker", "ui-serve", "migrate-status"])
def test_real_processes_do_not_echo_a_bad_dsn(
    tmp_path: Path, pg: PgTarget, form: str, command: str
) -> None:
    """The installed ``taskq`` script, its logging configured as in production."""
    env = pg.env(TASKQ_PG_DSN=BAD_DSNS[form])
    done = subprocess.run(
        [TASKQ_BIN, *COMMANDS[command]],
        env=env,
        cwd=Path(__file__).parents[2],  # the actors module imports from the checkout
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert (done.stdout + done.stderr).count(PASSWORD) == 0, done.stderr
    assert "TASKQ_PG_DSN" in done.stderr and "expected postgresql://" in done.stderr


def test_real_workgroup_check_does_not_echo_a_bad_dsn(tmp_path: Path, pg: PgTarget) -> None:
    dsn = json.dumps(BAD_DSNS["keyword-value"])
    (tmp_path / "group.toml").write_text(f"{WORKGROUP}env = {{ TASKQ_PG_DSN = {dsn} }}\n")
    done = subprocess.run(
        [TASKQ_BIN, "workgroup", "check", str(tmp_path / "group.toml"), "--no-import"],
        env=pg.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert (done.stdout + done.stderr).count(PASSWORD) == 0, done.stderr
    assert "workers[0].env.TASKQ_PG_DSN" in done.stderr
