"""Workgroup TOML: the file format, its validation, and the plan of children it yields.

``load_workgroup(path)`` parses and validates a file (pydantic, unknown keys rejected); every
problem is raised as one ``FILE: key.path: reason`` line. ``build_plan(...)`` merges
``[defaults]`` into each ``[[workers]]`` spec, expands ``processes = N`` into N children and
computes each child's ``taskq worker`` command line, environment and health settings.
``starter_toml()`` is the commented file ``taskq workgroup init`` writes.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import shlex
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import tomli_w
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from taskq_core.durations import parse_duration
from taskq_core.errors import ConfigError
from taskq_core.settings import ENV_PREFIX, TaskqSettings
from taskq_core.supervisor.policy import RestartPolicy

# sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107
INSTANCE_PLACEHOLDER = "(assigned at start)"

# Variables the supervisor sets on every child itself, and the ones a spec key owns.
SUPERVISOR_OWNED_ENV = {
    "TASKQ_WORKER_LABEL": "set by the supervisor to each child's label",
    "TASKQ_WORKGROUP_INSTANCE": "set by the supervisor to the group's UUIDv7",
    "TASKQ_HEALTH_SOCKET_PATH": "set by the supervisor: each child gets its own socket",
}
SPEC_KEY_ENV = {
    "TASKQ_QUEUES": "queues",
    "TASKQ_MAX_CONCURRENCY": "max_concurrency",
    "TASKQ_POLL_INTERVAL": "poll_interval",
}

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
_ACTORS_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_RE = re.compile(r"PASSWORD|SECRET|TOKEN|DSN|CREDENTIAL", re.IGNORECASE)


class WorkgroupConfigError(ConfigError):
    """A workgroup file is unreadable or invalid: names the file, the key path and the reason."""

    def __init__(self, file: str | Path, key: str, reason: str) -> None:
        self.file = str(file)
        self.key = key
        self.reason = " ".join(reason.split())
        super().__init__(f"{self.file}: {key}: {self.reason}")


# --- field types -------------------------------------------------------------------------


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError('expected seconds (a number) or a duration such as "30s"')
    return parse_duration(value).total_seconds()


def _worker_name(value: str) -> str:
    if not _NAME_RE.fullmatch(value):
        raise ValueError(
            f"invalid name {value!r}: use 1-40 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


def _actors_ref(value: str) -> str:
    if not _ACTORS_RE.fullmatch(value):
        raise ValueError(
            f"invalid {value!r}: expected MODULE:ATTRIBUTE, e.g. myapp.actors:registry"
        )
    return value


def _queue_name(value: str) -> str:
    if not value or any(ch.isspace() or ch == "," for ch in value):
        raise ValueError(
            f"invalid queue name {value!r}: must be non-empty, without spaces or commas"
        )
    return value


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise ValueError("expected a string, number or boolean")


PositiveSeconds = Annotated[float, BeforeValidator(_seconds), Field(gt=0)]
WorkerName = Annotated[str, AfterValidator(_worker_name)]
ActorsRef = Annotated[str, AfterValidator(_actors_ref)]
QueueName = Annotated[str, AfterValidator(_queue_name)]
EnvValue = Annotated[str, BeforeValidator(_env_value)]


# --- the file, as pydantic models --------------------------------------------------------


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class HealthTable(_Table):
    """``[workers.health]`` / ``[defaults.health]``: liveness through ``workers.last_seen_at``."""

    enabled: bool | None = None
    check_interval: PositiveSeconds | None = None
    stale_after: PositiveSeconds | None = None
    start_timeout: PositiveSeconds | None = None


class _SpecKeys(_Table):
    queues: Annotated[list[QueueName], Field(min_length=1)] | None = None
    max_concurrency: Annotated[int, Field(ge=1, le=10_000)] | None = None
    poll_interval: PositiveSeconds | None = None
    processes: Annotated[int, Field(ge=1, le=256)] | None = None
    env: dict[str, EnvValue] | None = None
    health: HealthTable | None = None


class DefaultsTable(_SpecKeys):
    """``[defaults]``: any spec key but ``name``/``actors``, merged into every spec."""


class WorkerTable(_SpecKeys):
    """One ``[[workers]]`` table: a spec of ``processes`` identical children."""

    name: WorkerName
    actors: ActorsRef | None = None


class SupervisorTable(_Table):
    """``[supervisor]``: how the supervisor itself restarts and stops children."""

    shutdown_timeout: PositiveSeconds | None = None
    backoff_initial: PositiveSeconds = 1.0
    backoff_max: PositiveSeconds = 30.0
    backoff_reset_after: PositiveSeconds = 30.0
    burst_limit: Annotated[int, Field(ge=0, le=10_000)] = 5
    burst_window: PositiveSeconds = 60.0
    runtime_dir: Annotated[str, Field(min_length=1)] | None = None


class WorkgroupFile(_Table):
    """The whole file."""

    actors: ActorsRef
    defaults: DefaultsTable = DefaultsTable()
    supervisor: SupervisorTable = SupervisorTable()
    workers: Annotated[list[WorkerTable], Field(min_length=1)]


# --- the validated, merged configuration -------------------------------------------------


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """Resolved health-check settings of one spec (built-in defaults filled in)."""

    enabled: bool = True
    check_interval: float = 15.0
    stale_after: float = 60.0
    start_timeout: float = 60.0


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """One ``[[workers]]`` table with ``[defaults]`` merged in."""

    index: int
    name: str
    actors: str
    queues: tuple[str, ...]
    max_concurrency: int | None
    poll_interval: float | None
    processes: int
    env: Mapping[str, str]
    health: HealthSettings

    @property
    def key(self) -> str:
        """This spec's key path in the file, for error messages."""
        return f"workers[{self.index}]"

    def labels(self) -> list[str]:
        """The labels of this spec's children: ``name-1`` .. ``name-N``."""
        return [f"{self.name}-{ordinal}" for ordinal in range(1, self.processes + 1)]


@dataclass(frozen=True, slots=True)
class WorkgroupConfig:
    """A validated workgroup file."""

    path: Path
    actors: str
    specs: tuple[WorkerSpec, ...]
    restart: RestartPolicy
    shutdown_timeout: float | None
    runtime_dir: Path | None


def load_workgroup(path: str | Path) -> WorkgroupConfig:
    """Read, parse and validate a workgroup file; raise WorkgroupConfigError on any problem."""
    shown = str(path)
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkgroupConfigError(shown, "(file)", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise WorkgroupConfigError(shown, "(file)", "not UTF-8 text") from None
    return parse_workgroup(text, file=file)


def parse_workgroup(text: str, *, file: Path) -> WorkgroupConfig:
    """Validate TOML ``text`` as a workgroup file named ``file`` (used in messages)."""
    shown = str(file)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\(at line (\d+), column (\d+)\)", message)
        line_no = int(match.group(1)) if match else len(text.splitlines())  # end of document
        key = _locate_line(text, line_no)
        raise WorkgroupConfigError(shown, key, f"invalid TOML: {message}") from None
    try:
        model = WorkgroupFile.model_validate(raw)
    except ValidationError as exc:
        raise _describe(shown, raw, exc) from None
    return _resolve(file, model)


def _locate_line(text: str, line_no: int) -> str:
    """Best-effort key path of the TOML line a syntax error points at.

    A line without its own ``key =`` (a continuation of a multi-line array, say) belongs to
    the nearest assignment above it in the same table.
    """
    counters: dict[str, int] = {}
    table = ""
    last_key: str | None = None
    for line in text.splitlines()[:line_no]:
        stripped = line.strip()
        header = re.match(r"^\[\[\s*([^\]]+?)\s*\]\]", stripped) or re.match(
            r"^\[\s*([^\]]+?)\s*\]", stripped
        )
        if header:
            name = header.group(1)
            if stripped.startswith("[["):
                counters[name] = counters.get(name, 0) + 1
            table, last_key = _table_path(name, counters), None
            continue
        assignment = re.match(r'^\s*([A-Za-z0-9_.\-"\']+)\s*=', line)
        if assignment:
            last_key = assignment.group(1).strip("\"'")
    if last_key is not None:
        return f"{table}.{last_key}" if table else last_key
    return table or "(top level)"


def _table_path(name: str, counters: Mapping[str, int]) -> str:
    parts = [part.strip().strip("\"'") for part in name.split(".")]
    path = ""
    for i in range(len(parts)):
        dotted = ".".join(parts[: i + 1])
        path = f"{path}.{parts[i]}" if path else parts[i]
        if dotted in counters:
            path += f"[{counters[dotted] - 1}]"
    return path


_TYPE_REASONS = {
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected an array",
    "dict_type": "expected a table",
    "model_type": "expected a table",
}


def _describe(file: str, raw: Any, exc: ValidationError) -> WorkgroupConfigError:
    """The first pydantic error as a file/key/reason error (and how many more there are)."""
    errors = exc.errors()
    error = errors[0]
    kind = str(error.get("type", ""))
    loc = tuple(error.get("loc", ()))
    key = _key_path(raw, loc, include_missing=kind in ("missing", "extra_forbidden"))
    value = error.get("input")
    if kind == "extra_forbidden":
        reason = "unknown key" + _suggestion(raw, loc)
    elif kind == "missing":
        reason = "required" + _REQUIRED_HINTS.get(str(loc[-1]) if loc else "", "")
    elif kind == "too_short" and loc == ("workers",):
        reason = "at least one [[workers]] table is required"
    elif kind in _TYPE_REASONS:
        reason = f"{_TYPE_REASONS[kind]}, got {_toml_type(value)} {_short(value)}".rstrip()
        if loc == ("workers",) and kind == "list_type":
            reason = f"expected an array of tables, got {_toml_type(value)}: write [[workers]]"
    elif kind == "too_short":
        reason = "must not be empty"
    elif kind in _BOUND_REASONS:
        bound = (error.get("ctx") or {}).get(_BOUND_REASONS[kind][1])
        reason = f"must be {_BOUND_REASONS[kind][0]} {bound}, got {_short(value)}"
    else:
        # Our own validators (durations, names, actors) already quote the offending value.
        reason = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    if len(errors) > 1:
        reason += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return WorkgroupConfigError(file, key or "(top level)", reason)


_BOUND_REASONS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}

_REQUIRED_HINTS = {
    "actors": ': MODULE:ATTRIBUTE of the actors registry, e.g. actors = "myapp.actors:registry"',
    "workers": ": at least one [[workers]] table",
    "name": ": every [[workers]] table needs a name",
}


def _key_path(raw: Any, loc: Sequence[Any], *, include_missing: bool) -> str:
    """Render ``loc`` as ``a.b[0].c``, keeping only parts that exist in the file.

    pydantic adds union-member and validator tags to locations; walking the raw document
    drops them. A missing or unknown key is kept as the last part.
    """
    path = ""
    current = raw
    for position, part in enumerate(loc):
        if isinstance(current, dict) and isinstance(part, str) and part in current:
            path = f"{path}.{part}" if path else part
            current = current[part]
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            path += f"[{part}]"
            current = current[part]
        else:
            if include_missing and position == len(loc) - 1 and isinstance(part, str):
                path = f"{path}.{part}" if path else part
            break
    return path


def _suggestion(raw: Any, loc: Sequence[Any]) -> str:
    """`` (did you mean 'x'?)`` for a misspelt key, from the model that rejected it."""
    model: type[BaseModel] | None = WorkgroupFile
    for part in loc[:-1]:
        if model is None or isinstance(part, int):
            continue
        model = _SUBTABLES.get((model, str(part)))
    if model is None or not loc:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


_SUBTABLES: dict[tuple[type[BaseModel], str], type[BaseModel]] = {
    (WorkgroupFile, "defaults"): DefaultsTable,
    (WorkgroupFile, "supervisor"): SupervisorTable,
    (WorkgroupFile, "workers"): WorkerTable,
    (DefaultsTable, "health"): HealthTable,
    (WorkerTable, "health"): HealthTable,
}


def _toml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


def _short(value: Any) -> str:
    if isinstance(value, dict | list):
        return ""
    text = repr(value)
    return f"{text[:40]}..." if len(text) > 43 else text


def _resolve(file: Path, model: WorkgroupFile) -> WorkgroupConfig:
    """Semantic checks pydantic cannot express, then merge defaults into each spec."""
    shown = str(file)
    seen: dict[str, int] = {}
    for index, worker in enumerate(model.workers):
        if worker.name in seen:
            raise WorkgroupConfigError(
                shown,
                f"workers[{index}].name",
                f"duplicate worker name {worker.name!r} (also workers[{seen[worker.name]}])",
            )
        seen[worker.name] = index
    sup = model.supervisor
    if sup.backoff_max < sup.backoff_initial:
        raise WorkgroupConfigError(
            shown,
            "supervisor.backoff_max",
            f"must be >= backoff_initial ({sup.backoff_initial:g}s), got {sup.backoff_max:g}s",
        )
    _check_env(shown, "defaults.env", model.defaults.env or {})
    specs = []
    for index, worker in enumerate(model.workers):
        _check_env(shown, f"workers[{index}].env", worker.env or {})
        specs.append(_merge(shown, index, model, worker))
    runtime_dir = None
    if sup.runtime_dir is not None:
        runtime_dir = Path(sup.runtime_dir).expanduser()
        if not runtime_dir.is_absolute():
            runtime_dir = file.resolve().parent / runtime_dir
    return WorkgroupConfig(
        path=file,
        actors=model.actors,
        specs=tuple(specs),
        restart=RestartPolicy(
            backoff_initial=sup.backoff_initial,
            backoff_max=sup.backoff_max,
            backoff_reset_after=sup.backoff_reset_after,
            burst_limit=sup.burst_limit,
            burst_window=sup.burst_window,
        ),
        shutdown_timeout=sup.shutdown_timeout,
        runtime_dir=runtime_dir,
    )


def _check_env(file: str, key: str, env: Mapping[str, str]) -> None:
    known = {ENV_PREFIX + name.upper() for name in TaskqSettings.model_fields}
    for name in env:
        where = f"{key}.{name}"
        if not _ENV_NAME_RE.fullmatch(name):
            raise WorkgroupConfigError(file, where, "not a valid environment variable name")
        upper = name.upper()
        if upper in SUPERVISOR_OWNED_ENV:
            raise WorkgroupConfigError(file, where, SUPERVISOR_OWNED_ENV[upper])
        if upper in SPEC_KEY_ENV:
            raise WorkgroupConfigError(
                file, where, f"set the spec's `{SPEC_KEY_ENV[upper]}` key instead"
            )
        if upper.startswith(ENV_PREFIX) and upper not in known:
            close = difflib.get_close_matches(upper, sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise WorkgroupConfigError(file, where, f"unknown TaskQ setting{hint}")


def _merge(file: str, index: int, model: WorkgroupFile, worker: WorkerTable) -> WorkerSpec:
    defaults = model.defaults
    queues = worker.queues or defaults.queues
    if not queues:
        raise WorkgroupConfigError(
            file, f"workers[{index}].queues", "required (set it here or in [defaults])"
        )
    if len(set(queues)) != len(queues):
        where = f"workers[{index}].queues" if worker.queues else "defaults.queues"
        raise WorkgroupConfigError(file, where, "lists a queue twice")
    base_health = HealthSettings()
    health_values: dict[str, Any] = {}
    for table in (defaults.health, worker.health):
        if table is not None:
            health_values.update(table.model_dump(exclude_none=True))
    health = HealthSettings(
        enabled=health_values.get("enabled", base_health.enabled),
        check_interval=health_values.get("check_interval", base_health.check_interval),
        stale_after=health_values.get("stale_after", base_health.stale_after),
        start_timeout=health_values.get("start_timeout", base_health.start_timeout),
    )
    return WorkerSpec(
        index=index,
        name=worker.name,
        actors=worker.actors or model.actors,
        queues=tuple(queues),
        max_concurrency=_first(worker.max_concurrency, defaults.max_concurrency),
        poll_interval=_first(worker.poll_interval, defaults.poll_interval),
        processes=_first(worker.processes, defaults.processes) or 1,
        env={**(defaults.env or {}), **(worker.env or {})},
        health=health,
    )


def _first(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


# --- the plan: what `start` runs and `check` prints --------------------------------------


@dataclass(frozen=True, slots=True)
class ChildPlan:
    """One child process: its label, command line, environment overlay and health settings."""

    label: str
    spec: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    queues: tuple[str, ...]
    concurrency: int
    poll_interval: float
    health: HealthSettings
    health_socket: Path

    @property
    def command(self) -> str:
        """The command line, shell-quoted."""
        return shlex.join(self.argv)

    def shown_env(self) -> dict[str, str]:
        """The environment overlay with secret-looking values masked, for printing."""
        return {k: ("***" if _SECRET_RE.search(k) else v) for k, v in self.env.items()}


@dataclass(frozen=True, slots=True)
class WorkgroupPlan:
    """Everything the supervisor needs: the children, the policies and the runtime directory."""

    file: Path
    instance: str
    until_idle: bool
    runtime_dir: Path
    shutdown_timeout: float
    restart: RestartPolicy
    children: tuple[ChildPlan, ...] = field(default_factory=tuple)

    def spec_names(self) -> list[str]:
        """Spec names in file order."""
        return list(dict.fromkeys(child.spec for child in self.children))


def default_runtime_dir(file: Path) -> Path:
    """Where the health sockets of a file's children live unless ``runtime_dir`` says otherwise.

    Derived from the file's absolute path and the user, so it is stable across restarts
    (probes can find the sockets) and short enough for a Unix socket path.
    """
    digest = hashlib.sha256(str(file.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"taskq-{os.getuid()}-{digest}"


def build_plan(
    config: WorkgroupConfig,
    *,
    instance: str = INSTANCE_PLACEHOLDER,
    until_idle: bool = False,
    idle_max_runtime: float | None = None,
    python: str | None = None,
) -> WorkgroupPlan:
    """Expand a validated config into children; check each spec's effective worker settings.

    Each spec's settings are validated the way its children will load them (the current
    environment, ``.env``, then the spec's ``env`` and keys), so a spec that would crash-loop on
    a bad setting is reported here, with its key path, instead.
    """
    shown = str(config.path)
    runtime_dir = config.runtime_dir or default_runtime_dir(config.path)
    children: list[ChildPlan] = []
    grace = 0.0
    for spec in config.specs:
        settings = _spec_settings(shown, spec)
        grace = max(grace, settings.termination_grace_period)
        for label in spec.labels():
            socket_path = runtime_dir / f"{label}.sock"
            if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH:
                raise WorkgroupConfigError(
                    shown,
                    "supervisor.runtime_dir",
                    f"health socket path {str(socket_path)!r} is longer than "
                    f"{MAX_SOCKET_PATH} bytes; choose a shorter runtime_dir",
                )
            argv = _worker_argv(
                spec, label, socket_path, python or sys.executable, until_idle, idle_max_runtime
            )
            env = {
                **spec.env,
                "TASKQ_WORKER_LABEL": label,
                "TASKQ_WORKGROUP_INSTANCE": instance,
            }
            children.append(
                ChildPlan(
                    label=label,
                    spec=spec.name,
                    argv=tuple(argv),
                    env=env,
                    queues=spec.queues,
                    concurrency=settings.max_concurrency,
                    poll_interval=settings.poll_interval,
                    health=spec.health,
                    health_socket=socket_path,
                )
            )
    return WorkgroupPlan(
        file=config.path,
        instance=instance,
        until_idle=until_idle,
        runtime_dir=runtime_dir,
        # By default, outwait the children's own forced exit (TASKQ_TERMINATION_GRACE_PERIOD).
        shutdown_timeout=config.shutdown_timeout or grace + 5.0,
        restart=config.restart,
        children=tuple(children),
    )


def _spec_settings(file: str, spec: WorkerSpec) -> TaskqSettings:
    overrides: dict[str, Any] = {
        name.upper().removeprefix(ENV_PREFIX).lower(): value
        for name, value in spec.env.items()
        if name.upper().startswith(ENV_PREFIX)
    }
    overrides.update(
        queues=list(spec.queues),
        max_concurrency=spec.max_concurrency,
        poll_interval=spec.poll_interval,
    )
    try:
        return TaskqSettings.load(**overrides)
    except ConfigError as exc:
        message = str(exc)
        variable = re.search(r"invalid setting (TASKQ_[A-Z0-9_]+)", message)
        key = spec.key + ".env"
        if variable and any(name.upper() == variable.group(1) for name in spec.env):
            key += "." + next(n for n in spec.env if n.upper() == variable.group(1))
        elif variable and variable.group(1) in ("TASKQ_MAX_CONCURRENCY", "TASKQ_POLL_INTERVAL"):
            key = f"{spec.key}.{variable.group(1).removeprefix(ENV_PREFIX).lower()}"
        elif variable:
            message += " (from the environment)"
        raise WorkgroupConfigError(file, key, f"children would not start: {message}") from None


def _worker_argv(
    spec: WorkerSpec,
    label: str,
    socket_path: Path,
    python: str,
    until_idle: bool,
    idle_max_runtime: float | None,
) -> list[str]:
    argv = [python, "-m", "taskq_cli", "worker", "--actors", spec.actors]
    for queue in spec.queues:
        argv += ["--queues", queue]
    if spec.max_concurrency is not None:
        argv += ["--concurrency", str(spec.max_concurrency)]
    if spec.poll_interval is not None:
        argv += ["--poll-interval", f"{spec.poll_interval:g}s"]
    argv += ["--label", label, "--health-socket", str(socket_path)]
    if until_idle:
        argv.append("--until-idle")
        if idle_max_runtime is not None:
            argv += ["--idle-max-runtime", f"{idle_max_runtime:g}s"]
    return argv


# --- `taskq workgroup init` --------------------------------------------------------------


def _section(comment: str, data: Mapping[str, Any]) -> str:
    lines = "".join(f"# {line}".rstrip() + "\n" for line in comment.strip().splitlines())
    return lines + tomli_w.dumps(data)


def starter_toml() -> str:
    """The commented starter file ``taskq workgroup init`` writes; it passes validation."""
    return "\n".join(
        [
            _section(
                """
TaskQ workgroup: `taskq workgroup start FILE` runs one `taskq worker` child per process
below, restarts children that exit (with backoff, giving up a spec that crash-loops) and
kills a child whose heartbeat in the workers table goes stale. `taskq workgroup check FILE`
validates this file and prints the plan. Durations are seconds or strings like "30s", "5m".
Children inherit the environment (TASKQ_PG_DSN, TASKQ_SCHEMA_NAME, .env, ...).

MODULE:ATTRIBUTE of the actors every child loads (a [[workers]] table may override it).
""",
                {"actors": "myapp.actors:registry"},
            ),
            _section(
                """
Merged into every [[workers]] table; a key set in the table wins. Any spec key may go here
except name and actors: queues, max_concurrency, poll_interval, processes, env, health.
""",
                {"defaults": {"max_concurrency": 4, "poll_interval": 1.0}},
            ),
            _section(
                """
One [[workers]] table per kind of worker. `processes = N` runs N identical children,
labelled name-1 .. name-N (TASKQ_WORKER_LABEL). `env` adds variables for its children only.
[workers.health]: every check_interval the supervisor reads the child's workers row; one whose
last_seen_at has not moved for stale_after (or that has not registered within
start_timeout) is killed with SIGKILL and restarted.
""",
                {
                    "workers": [
                        {
                            "name": "api",
                            "queues": ["default"],
                            "max_concurrency": 8,
                            "poll_interval": 0.5,
                            "processes": 2,
                            "env": {"TASKQ_LOG_LEVEL": "INFO"},
                            "health": {
                                "enabled": True,
                                "check_interval": 15,
                                "stale_after": 60,
                                "start_timeout": 60,
                            },
                        }
                    ]
                },
            ),
            _section(
                "A second spec: one child for the media queue, with the defaults above.",
                {"workers": [{"name": "media", "queues": ["media"], "max_concurrency": 2}]},
            ),
            _section(
                """
How the supervisor itself behaves (all optional). A child that keeps dying young (up less
than backoff_reset_after) is restarted after 1s, 2s, 4s ... up to backoff_max. More than
burst_limit exits of one child within burst_window, or that many young exits in a row, give
its spec up (logged as spec_given_up; the other specs keep running). On
SIGTERM/SIGINT every child gets SIGTERM and, after shutdown_timeout (default: the children's
TASKQ_TERMINATION_GRACE_PERIOD + 5s), SIGKILL. runtime_dir holds the health sockets
(default: a directory under the system temp dir derived from this file's path).
""",
                {
                    "supervisor": {
                        "backoff_initial": "1s",
                        "backoff_max": "30s",
                        "backoff_reset_after": "30s",
                        "burst_limit": 5,
                        "burst_window": "60s",
                    }
                },
            ),
        ]
    )


# --- `taskq workgroup check`: do the actors load? ---------------------------------------


@dataclass(frozen=True, slots=True)
class ActorsReport:
    """What importing each spec's actors found: actor names per spec, and stranded actors."""

    actors: Mapping[str, tuple[str, ...]]  # spec name -> actor names
    warnings: tuple[str, ...]


def check_actors(config: WorkgroupConfig) -> ActorsReport:
    """Import every spec's actors as its children will; raise on failure, warn on stranding.

    An actor is stranded when no spec that loads it consumes its queue: its jobs would wait
    forever for this group (another host may still serve them, hence only a warning).
    """
    from taskq_core.actors import load_registry

    shown = str(config.path)
    loaded: dict[str, dict[str, str]] = {}
    names: dict[str, tuple[str, ...]] = {}
    consumed: dict[str, set[str]] = {}
    for spec in config.specs:
        if spec.actors not in loaded:
            try:
                registry = load_registry(spec.actors)
            except ConfigError as exc:
                key = "actors" if spec.actors == config.actors else f"{spec.key}.actors"
                raise WorkgroupConfigError(shown, key, str(exc)) from None
            loaded[spec.actors] = {name: ref.queue for name, ref in registry.items()}
        names[spec.name] = tuple(sorted(loaded[spec.actors]))
        consumed.setdefault(spec.actors, set()).update(spec.queues)
    warnings = []
    for ref, queues_by_actor in loaded.items():
        for actor_name, queue in sorted(queues_by_actor.items()):
            if queue not in consumed[ref]:
                warnings.append(
                    f"actor {actor_name!r} ({ref}) is on queue {queue!r}, "
                    "which no spec loading it consumes"
                )
    return ActorsReport(actors=names, warnings=tuple(warnings))
