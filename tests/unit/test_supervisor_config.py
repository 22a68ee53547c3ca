"""Workgroup TOML: every invalid file names the file, the key path and the reason; the plan."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from taskq_core.supervisor.config import (
    INSTANCE_PLACEHOLDER,
    MAX_SOCKET_PATH,
    WorkgroupConfigError,
    build_plan,
    check_actors,
    default_runtime_dir,
    load_workgroup,
    parse_workgroup,
    starter_toml,
)

VALID = """\
actors = "myapp.actors:registry"

[defaults]
max_concurrency = 4
poll_interval = "2s"
env = { SHARED = "yes", TASKQ_LOG_LEVEL = "WARNING" }

[defaults.health]
check_interval = 10
stale_after = "45s"

[[workers]]
name = "api"
queues = ["default", "urgent"]
max_concurrency = 8
processes = 2
env = { TASKQ_LOG_LEVEL = "DEBUG", TASKQ_HEARTBEAT_INTERVAL = 2 }

[workers.health]
stale_after = 30

[[workers]]
name = "media"
queues = ["media"]
actors = "myapp.media:registry"

[workers.health]
enabled = false
"""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Effective settings are validated against the environment: keep it neutral."""
    for key in list(os.environ):
        if key.startswith("TASKQ_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # no stray .env


def write(tmp_path: Path, text: str, name: str = "group.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


A = 'actors = "a:b"\n'
W = '[[workers]]\nname = "w"\nqueues = ["q"]\n'
W_NO_QUEUES = '[[workers]]\nname = "w"\n'
MINIMAL = 'actors = "a.b:registry"\n' + W


def case(case_id: str, text: str, key: str, reason: str) -> object:
    """One invalid file, the key path its error must name and a fragment of the reason."""
    return pytest.param(text, key, reason, id=case_id)


INVALID = [
    case("syntax error", A + W_NO_QUEUES + 'queues = ["q"\n', "workers[0].queues", "invalid TOML"),
    case(
        "syntax error in a later table",
        A + W + '[[workers]]\nname = "x"\nmax_concurrency = \n',
        "workers[1].max_concurrency",
        "invalid TOML",
    ),
    case("unknown top-level key", "colour = 1\n" + MINIMAL, "colour", "unknown key"),
    case(
        "unknown key in defaults",
        A + "[defaults]\nmax_concurency = 2\n" + W,
        "defaults.max_concurency",
        "unknown key (did you mean 'max_concurrency'?)",
    ),
    case("unknown key in workers", MINIMAL + "threads = 2\n", "workers[0].threads", "unknown key"),
    case(
        "unknown key in health",
        MINIMAL + "[workers.health]\nstale = 5\n",
        "workers[0].health.stale",
        "unknown key (did you mean 'stale_after'?)",
    ),
    case(
        "unknown key in defaults.health",
        A + "[defaults.health]\ninterval = 5\n" + W,
        "defaults.health.interval",
        "unknown key",
    ),
    case(
        "unknown key in supervisor",
        MINIMAL + "[supervisor]\nburst = 3\n",
        "supervisor.burst",
        "unknown key",
    ),
    case(
        "string for an integer",
        MINIMAL + 'max_concurrency = "8"\n',
        "workers[0].max_concurrency",
        "expected an integer, got a string '8'",
    ),
    case(
        "float for an integer",
        MINIMAL + "processes = 1.5\n",
        "workers[0].processes",
        "expected an integer",
    ),
    case(
        "string for a boolean",
        MINIMAL + '[workers.health]\nenabled = "yes"\n',
        "workers[0].health.enabled",
        "expected true or false",
    ),
    case(
        "string for an array",
        A + W_NO_QUEUES + 'queues = "q"\n',
        "workers[0].queues",
        "expected an array",
    ),
    case(
        "bad duration",
        MINIMAL + '[workers.health]\nstale_after = "soon"\n',
        "workers[0].health.stale_after",
        "invalid duration 'soon'",
    ),
    case(
        "boolean for a duration",
        MINIMAL + "poll_interval = true\n",
        "workers[0].poll_interval",
        "expected seconds",
    ),
    case(
        "zero interval",
        MINIMAL + "[workers.health]\ncheck_interval = 0\n",
        "workers[0].health.check_interval",
        "must be > 0",
    ),
    case("table for a scalar", A + "defaults = 3\n" + W, "defaults", "expected a table"),
    case("workers as a table", A + '[workers]\nname = "w"\n', "workers", "write [[workers]]"),
    case("missing actors", W, "actors", "required"),
    case(
        "malformed actors",
        MINIMAL.replace("a.b:registry", "a.b.registry"),
        "actors",
        "expected MODULE:ATTRIBUTE",
    ),
    case("missing workers", A, "workers", "required"),
    case("empty workers", A + "workers = []\n", "workers", "at least one [[workers]] table"),
    case("missing name", A + '[[workers]]\nqueues = ["q"]\n', "workers[0].name", "required"),
    case(
        "bad name",
        A + '[[workers]]\nname = "my worker"\nqueues = ["q"]\n',
        "workers[0].name",
        "invalid name 'my worker'",
    ),
    case(
        "duplicate names",
        MINIMAL + '[[workers]]\nname = "w"\nqueues = ["r"]\n',
        "workers[1].name",
        "duplicate worker name 'w' (also workers[0])",
    ),
    case(
        "processes below 1",
        MINIMAL + "processes = 0\n",
        "workers[0].processes",
        "must be >= 1, got 0",
    ),
    case(
        "max_concurrency below 1",
        MINIMAL + "max_concurrency = -2\n",
        "workers[0].max_concurrency",
        "must be >= 1",
    ),
    case("no queues anywhere", A + W_NO_QUEUES, "workers[0].queues", "required"),
    case(
        "empty queues", A + W_NO_QUEUES + "queues = []\n", "workers[0].queues", "must not be empty"
    ),
    case(
        "queue with a comma",
        A + W_NO_QUEUES + 'queues = ["a,b"]\n',
        "workers[0].queues[0]",
        "invalid queue name",
    ),
    case(
        "duplicate queue",
        A + W_NO_QUEUES + 'queues = ["q", "q"]\n',
        "workers[0].queues",
        "lists a queue twice",
    ),
    case(
        "env value of the wrong type",
        MINIMAL + "env = { A = [1] }\n",
        "workers[0].env.A",
        "expected a string, number or boolean",
    ),
    case(
        "env owned by the supervisor",
        MINIMAL + 'env = { TASKQ_WORKER_LABEL = "x" }\n',
        "workers[0].env.TASKQ_WORKER_LABEL",
        "set by the supervisor",
    ),
    case(
        "env owned by a spec key",
        MINIMAL + 'env = { TASKQ_QUEUES = "x" }\n',
        "workers[0].env.TASKQ_QUEUES",
        "`queues` key",
    ),
    case(
        "unknown TaskQ setting",
        MINIMAL + "env = { TASKQ_HEARTBEAT_INTERVL = 1 }\n",
        "workers[0].env.TASKQ_HEARTBEAT_INTERVL",
        "did you mean 'TASKQ_HEARTBEAT_INTERVAL'",
    ),
    case(
        "invalid setting value",
        MINIMAL + 'env = { TASKQ_LOG_LEVEL = "LOUD" }\n',
        "workers[0].env.TASKQ_LOG_LEVEL",
        "children would not start",
    ),
    case(
        "settings violating an invariant",
        MINIMAL + "env = { TASKQ_LOCK_LEASE = 1 }\n",
        "workers[0].env",
        "TASKQ_LOCK_LEASE (1s) must be >= 4 x",
    ),
    case(
        "backoff_max below backoff_initial",
        MINIMAL + "[supervisor]\nbackoff_initial = 10\nbackoff_max = 5\n",
        "supervisor.backoff_max",
        "must be >= backoff_initial",
    ),
    case(
        "runtime dir too long for a socket",
        MINIMAL + f'[supervisor]\nruntime_dir = "/{"d" * 120}"\n',
        "supervisor.runtime_dir",
        f"longer than {MAX_SOCKET_PATH} bytes",
    ),
]


@pytest.mark.parametrize(("text", "key", "reason"), INVALID)
def test_every_invalid_file_reports_file_key_and_reason(
    tmp_path: Path, text: str, key: str, reason: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(WorkgroupConfigError) as caught:
        build_plan(load_workgroup(path))
    error = caught.value
    assert (error.file, error.key) == (str(path), key)
    assert reason in error.reason
    message = str(error)
    assert message.startswith(f"{path}: {key}: ")
    assert "\n" not in message


def test_a_missing_file_is_reported_with_its_name(tmp_path: Path) -> None:
    with pytest.raises(WorkgroupConfigError, match=r"nope\.toml: \(file\): cannot read"):
        load_workgroup(tmp_path / "nope.toml")


def test_several_problems_report_the_first_and_count_the_rest(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "a = 1\nb = 2\n")
    with pytest.raises(WorkgroupConfigError, match=r"\(and 1 more problem\)"):
        load_workgroup(path)


def test_defaults_merge_into_each_spec_and_the_spec_wins(tmp_path: Path) -> None:
    config = load_workgroup(write(tmp_path, VALID))
    api, media = config.specs
    assert api.queues == ("default", "urgent")
    assert (api.max_concurrency, api.poll_interval, api.processes) == (8, 2.0, 2)
    assert dict(api.env) == {
        "SHARED": "yes",
        "TASKQ_LOG_LEVEL": "DEBUG",
        "TASKQ_HEARTBEAT_INTERVAL": "2",
    }
    assert (api.health.enabled, api.health.check_interval, api.health.stale_after) == (
        True,
        10.0,
        30.0,
    )
    assert (media.max_concurrency, media.poll_interval, media.processes) == (4, 2.0, 1)
    assert media.actors == "myapp.media:registry" and api.actors == "myapp.actors:registry"
    assert media.health.enabled is False and media.health.stale_after == 45.0


def test_processes_expand_into_labelled_children_with_their_own_sockets(tmp_path: Path) -> None:
    plan = build_plan(load_workgroup(write(tmp_path, VALID)), instance="inst-1")
    assert [c.label for c in plan.children] == ["api-1", "api-2", "media-1"]
    sockets = {c.health_socket for c in plan.children}
    assert len(sockets) == 3
    assert all(s.parent == plan.runtime_dir and s.name.endswith(".sock") for s in sockets)
    for child in plan.children:
        assert child.env["TASKQ_WORKER_LABEL"] == child.label
        assert child.env["TASKQ_WORKGROUP_INSTANCE"] == "inst-1"


def test_each_child_runs_taskq_worker_with_the_spec_as_flags(tmp_path: Path) -> None:
    plan = build_plan(load_workgroup(write(tmp_path, VALID)), python="python3")
    api = plan.children[0]
    assert list(api.argv) == [
        "python3", "-m", "taskq_cli", "worker", "--actors", "myapp.actors:registry",
        "--queues", "default", "--queues", "urgent", "--concurrency", "8",
        "--poll-interval", "2s", "--label", "api-1", "--health-socket", str(api.health_socket),
    ]  # fmt: skip
    assert api.command.startswith("python3 -m taskq_cli worker --actors myapp.actors:registry")
    assert api.env["TASKQ_WORKGROUP_INSTANCE"] == INSTANCE_PLACEHOLDER


def test_until_idle_is_passed_to_every_child(tmp_path: Path) -> None:
    plan = build_plan(load_workgroup(write(tmp_path, VALID)), until_idle=True, idle_max_runtime=90)
    assert plan.until_idle
    for child in plan.children:
        assert child.argv[-3:] == ("--until-idle", "--idle-max-runtime", "90s")


def test_unset_keys_leave_the_worker_settings_in_charge(tmp_path: Path) -> None:
    plan = build_plan(load_workgroup(write(tmp_path, MINIMAL)))
    (child,) = plan.children
    assert "--concurrency" not in child.argv and "--poll-interval" not in child.argv
    assert (child.concurrency, child.poll_interval) == (8, 1.0)  # the TaskqSettings defaults


def test_the_shutdown_timeout_outwaits_the_childrens_own_grace_period(tmp_path: Path) -> None:
    plan = build_plan(load_workgroup(write(tmp_path, VALID)))
    assert plan.shutdown_timeout == 75.0 + 5.0
    text = MINIMAL + '[supervisor]\nshutdown_timeout = "12s"\n'
    assert build_plan(load_workgroup(write(tmp_path, text))).shutdown_timeout == 12.0


def test_the_restart_policy_comes_from_the_supervisor_table(tmp_path: Path) -> None:
    text = MINIMAL + "[supervisor]\nbackoff_initial = 0.5\nburst_limit = 2\nburst_window = '10s'\n"
    policy = load_workgroup(write(tmp_path, text)).restart
    assert (policy.backoff_initial, policy.burst_limit, policy.burst_window) == (0.5, 2, 10.0)


def test_the_default_runtime_dir_is_stable_per_file_and_short(tmp_path: Path) -> None:
    first = default_runtime_dir(write(tmp_path, MINIMAL, "a.toml"))
    assert first == default_runtime_dir(tmp_path / "a.toml")
    assert first != default_runtime_dir(write(tmp_path, MINIMAL, "b.toml"))
    assert len(str(first / "some-worker-name-12.sock")) < MAX_SOCKET_PATH


def test_a_relative_runtime_dir_is_relative_to_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + '[supervisor]\nruntime_dir = "run"\n')
    assert load_workgroup(path).runtime_dir == tmp_path.resolve() / "run"


def test_secret_looking_env_values_are_masked_when_shown(tmp_path: Path) -> None:
    text = MINIMAL + 'env = { API_TOKEN = "hunter2", REGION = "eu" }\n'
    (child,) = build_plan(load_workgroup(write(tmp_path, text))).children
    shown = child.shown_env()
    assert shown["API_TOKEN"] == "***" and shown["REGION"] == "eu"
    assert child.env["API_TOKEN"] == "hunter2"


def test_the_starter_file_is_valid_commented_toml() -> None:
    text = starter_toml()
    assert text.count("\n# ") > 10
    data = tomllib.loads(text)
    assert set(data) == {"actors", "defaults", "workers", "supervisor"}
    config = parse_workgroup(text, file=Path("workgroup.toml"))
    assert [spec.name for spec in config.specs] == ["api", "media"]
    assert len(build_plan(config).children) == 3


def test_the_example_file_at_the_repo_root_is_valid() -> None:
    root = Path(__file__).resolve().parents[2]
    config = load_workgroup(root / "workgroup.example.toml")
    assert config.actors == "examples.actors:registry"
    assert {q for spec in config.specs for q in spec.queues} == {"default", "reports"}
    assert check_actors(config).warnings == ()


def test_check_actors_reports_an_import_failure_at_its_key(tmp_path: Path) -> None:
    text = MINIMAL.replace("a.b:registry", "tests.e2e.e2e_actors:registry") + (
        '[[workers]]\nname = "x"\nqueues = ["q"]\nactors = "no_such_module_for_tq:registry"\n'
    )
    config = load_workgroup(write(tmp_path, text))
    with pytest.raises(WorkgroupConfigError) as caught:
        check_actors(config)
    assert caught.value.key == "workers[1].actors"
    assert "cannot import 'no_such_module_for_tq'" in caught.value.reason


def test_check_actors_warns_about_actors_no_spec_consumes(tmp_path: Path) -> None:
    text = MINIMAL.replace("a.b:registry", "tests.e2e.e2e_actors:registry").replace(
        '["q"]', '["default"]'
    )
    report = check_actors(load_workgroup(write(tmp_path, text)))
    assert "echo" in report.actors["w"]
    assert any(w.startswith("actor 'fair'") and "queue 'fair'" in w for w in report.warnings)
