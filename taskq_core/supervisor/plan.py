"""The plan of a workgroup: which ``taskq worker`` children to run, and how each is started.

``build_plan(config)`` expands each spec's ``processes = N`` into N labelled children, computes
each child's command line, environment overlay and health socket, and validates each spec's
effective worker settings the way its children will load them. ``check_actors(config)`` imports
every spec's actors as the children will, for ``taskq workgroup check``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskq_core.credentials import shown_value
from taskq_core.errors import ConfigError
from taskq_core.settings import ENV_PREFIX, TaskqSettings
from taskq_core.supervisor.diagnostics import WorkgroupConfigError
from taskq_core.supervisor.policy import RestartPolicy
from taskq_core.supervisor.schema import HealthSettings, WorkerSpec, WorkgroupConfig

# sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107
INSTANCE_PLACEHOLDER = "(assigned at start)"


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
        """The environment overlay for printing: secret-named values as ``***``, passwords
        in URLs and ``password=`` masked (``credentials.shown_value``)."""
        return {k: shown_value(k, v) for k, v in self.env.items()}


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


def runtime_dir_of(config: WorkgroupConfig) -> Path:
    """The runtime directory of a file's supervisor: ``runtime_dir``, or the default."""
    return config.runtime_dir or default_runtime_dir(config.path)


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
    runtime_dir = runtime_dir_of(config)
    # The control socket lives beside the health sockets (``supervisor.control``).
    if len(os.fsencode(runtime_dir / "control.sock")) > MAX_SOCKET_PATH:
        raise WorkgroupConfigError(
            shown,
            "supervisor.runtime_dir",
            f"control socket path {str(runtime_dir / 'control.sock')!r} is longer than "
            f"{MAX_SOCKET_PATH} bytes; choose a shorter runtime_dir",
        )
    children: list[ChildPlan] = []
    grace = 0.0
    # Each child judges its actors' queues against the whole group's (the settings doc).
    group_queues = ",".join(sorted({queue for spec in config.specs for queue in spec.queues}))
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
                "TASKQ_WORKGROUP_QUEUES": group_queues,
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
