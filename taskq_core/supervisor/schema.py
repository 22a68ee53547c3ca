"""The workgroup file format: its TOML tables as strict pydantic models, and the merged config.

``load_workgroup(path)`` reads and validates a file (unknown keys rejected) and resolves it into
a ``WorkgroupConfig``: ``[defaults]`` merged into each ``[[workers]]`` spec, the restart policy
built from ``[supervisor]``. Every problem is raised through ``diagnostics`` as one line.
``starter_toml()`` is the commented file ``taskq workgroup init`` writes.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from taskq_core.durations import parse_duration
from taskq_core.settings import ENV_PREFIX, TaskqSettings
from taskq_core.supervisor.diagnostics import (
    WorkgroupConfigError,
    describe_toml_error,
    describe_validation_error,
)
from taskq_core.supervisor.policy import RestartPolicy

# The starter file `taskq workgroup init` writes, shipped inside this package.
STARTER_FILE = "starter.toml"

# Variables the supervisor sets on every child itself, and the ones a spec key owns.
SUPERVISOR_OWNED_ENV = {
    "TASKQ_WORKER_LABEL": "set by the supervisor to each child's label",
    "TASKQ_WORKGROUP_INSTANCE": "set by the supervisor to the group's UUIDv7",
    "TASKQ_WORKGROUP_QUEUES": "set by the supervisor to every queue the group consumes",
    "TASKQ_HEALTH_SOCKET_PATH": "set by the supervisor: each child gets its own socket",
    "TASKQ_WORKER_ID": "set by the supervisor: each child process registers under a new id",
}
SPEC_KEY_ENV = {
    "TASKQ_QUEUES": "queues",
    "TASKQ_MAX_CONCURRENCY": "max_concurrency",
    "TASKQ_POLL_INTERVAL": "poll_interval",
}

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
_ACTORS_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


# Alike workflows.py's StepSpec by shape only: a frozen record's fields, other data.
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
        raise describe_toml_error(shown, text, exc) from None
    try:
        model = WorkgroupFile.model_validate(raw)
    except ValidationError as exc:
        raise describe_validation_error(shown, raw, exc, root=WorkgroupFile) from None
    return _resolve(file, model)


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
        # Keyword fields, alike memory/batches.py's create_batch, protocol/schedules.py's
        # new_schedule and worker/execute.py's job_context by shape only: other data.
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


# --- `taskq workgroup init` --------------------------------------------------------------


def starter_toml() -> str:
    """The commented starter file ``taskq workgroup init`` writes; it passes validation.

    It is package data (``starter.toml`` next to this module), so it reads as the file a user
    gets, comments and all.
    """
    return (resources.files("taskq_core.supervisor") / STARTER_FILE).read_text(encoding="utf-8")
