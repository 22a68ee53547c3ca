"""Workgroup TOML: every invalid file names the file, the key path and the reason; the merge."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from taskq_core.supervisor.diagnostics import WorkgroupConfigError
from taskq_core.supervisor.plan import MAX_SOCKET_PATH, build_plan, check_actors
from taskq_core.supervisor.schema import load_workgroup, parse_workgroup, starter_toml
from tests.unit.workgroup_files import (
    MINIMAL,
    VALID,
    W,
    clean_environment,  # noqa: F401 (autouse fixture)
    write,
)

A = 'actors = "a:b"\n'
W_NO_QUEUES = '[[workers]]\nname = "w"\n'


def case(case_id: str, text: str, key: str, reason: str) -> object:
    """One invalid file, the key path its error must name and a fragment of the reason."""
    return pytest.param(text, key, reason, id=case_id)


INVALID = [
    # A syntax error names its line, and the key when that line assigns one.
    case(
        "syntax error",
        A + W_NO_QUEUES + 'queues = ["q"\n',
        "line 4 (workers[0].queues)",
        "invalid TOML: Unclosed array",
    ),
    case(
        "syntax error in a later table",
        A + W + '[[workers]]\nname = "x"\nmax_concurrency = \n',
        "line 7 (workers[1].max_concurrency)",
        "invalid TOML",
    ),
    # tomllib gives up at the end of the file: no key above it is to blame.
    case(
        "unclosed string",
        A + W + '[defaults]\nmax_concurrency = 2\nname_prefix = "x\n',
        "line 7 (defaults.name_prefix)",
        "invalid TOML",
    ),
    case("broken table header", A + "[workers\n" + 'name = "w"\n', "line 2", "invalid TOML"),
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


def test_several_problems_are_all_reported_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "a = 1\nb = 2\n")
    with pytest.raises(WorkgroupConfigError) as caught:
        load_workgroup(path)
    assert caught.value.key == "workers[0].a"
    assert caught.value.reason == "unknown key; workers[0].b: unknown key"
    assert "\n" not in str(caught.value)  # still one line


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


def test_the_restart_policy_comes_from_the_supervisor_table(tmp_path: Path) -> None:
    text = MINIMAL + "[supervisor]\nbackoff_initial = 0.5\nburst_limit = 2\nburst_window = '10s'\n"
    policy = load_workgroup(write(tmp_path, text)).restart
    assert (policy.backoff_initial, policy.burst_limit, policy.burst_window) == (0.5, 2, 10.0)


def test_a_relative_runtime_dir_is_relative_to_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + '[supervisor]\nruntime_dir = "run"\n')
    assert load_workgroup(path).runtime_dir == tmp_path.resolve() / "run"


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
