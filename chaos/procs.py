"""The real processes of a scenario: `taskq worker` and `taskq workgroup start`, and their logs.

Every process runs in a session of its own (a Ctrl-C of the runner reaches only the runner,
which then stops what it started) with stderr in a log file under the scenario's directory.
``Fleet.close`` stops whatever is still running, including workgroup children that outlived
their supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[1]
TASKQ_BIN = str(Path(sys.executable).parent / "taskq")
ACTORS = "chaos.actors:registry"

# Short cadences, so faults are detected and recovered from within seconds.
WORKER_SETTINGS = {
    "TASKQ_HEARTBEAT_INTERVAL": "0.5",
    "TASKQ_LOCK_LEASE": "3",
    "TASKQ_SWEEP_INTERVAL": "0.5",
    "TASKQ_SCHEDULED_WAKE_INTERVAL": "0.2",
    "TASKQ_CANCELLATION_GRACE_PERIOD": "1",
    "TASKQ_CLEANUP_GRACE_PERIOD": "1",
    "TASKQ_TERMINATION_GRACE_PERIOD": "20",
    "TASKQ_POLL_INTERVAL": "0.5",
    "TASKQ_HEALTH_ENABLED": "false",
    "TASKQ_OTEL_ENABLED": "false",
    "TASKQ_LOG_FORMAT": "json",
    "TASKQ_LOG_LEVEL": "INFO",
}
HEARTBEAT_INTERVAL = float(WORKER_SETTINGS["TASKQ_HEARTBEAT_INTERVAL"])
LOCK_LEASE = float(WORKER_SETTINGS["TASKQ_LOCK_LEASE"])
TERMINATION_GRACE = float(WORKER_SETTINGS["TASKQ_TERMINATION_GRACE_PERIOD"])


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) TaskQ process."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return any("taskq" in part for part in process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


class Proc:
    """One process the runner started."""

    def __init__(self, popen: subprocess.Popen[bytes], log: Path, name: str) -> None:
        self.popen = popen
        self.log = log
        self.name = name
        self.started_at = time.time()
        self.exited_at: float | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        code = self.popen.poll()
        if code is not None and self.exited_at is None:
            self.exited_at = time.time()
        return code

    def alive(self) -> bool:
        return self.returncode is None

    def signal(self, signum: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signum)

    async def wait(self, timeout: float) -> int | None:
        """The exit code, or None if the process is still running after ``timeout``."""
        deadline = time.monotonic() + timeout
        while (code := self.returncode) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return code

    def records(self) -> list[dict[str, Any]]:
        """The JSON log records written so far (other lines skipped)."""
        out: list[dict[str, Any]] = []
        if not self.log.exists():
            return out
        for line in self.log.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                out.append(record)
        return out

    def evidence(self, limit: int = 2) -> str:
        """The last error-level log events, or the last lines of the log: why it exited."""
        picked = [
            r
            for r in self.records()
            if str(r.get("level", "")).lower() in ("error", "critical", "exception")
        ]
        if picked:
            return "; ".join(_brief(r) for r in picked[-limit:])
        if not self.log.exists():
            return "(no log)"
        lines = [line for line in self.log.read_text(errors="replace").splitlines() if line]
        return " | ".join(line[:200] for line in lines[-limit:]) or "(empty log)"

    def describe_exit(self) -> str:
        code = self.returncode
        if code is None:
            last = self.records()[-1:] or [{"event": "(none)"}]
            return f"{self.name} (pid {self.pid}) still running; last log event {_brief(last[0])}"
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
        return f"{self.name} (pid {self.pid}) {how}: {self.evidence()}"


def _brief(record: dict[str, Any]) -> str:
    keys = ("error", "exc", "exception", "reason", "detector", "exit_code")
    extra = ", ".join(f"{k}={str(record[k])[:160]}" for k in keys if k in record)
    return f"{record.get('event')}" + (f" ({extra})" if extra else "")


class Workgroup(Proc):
    """A `taskq workgroup start` process; its lifecycle events come from its JSON log."""

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in self.records()
            if r.get("component") == "workgroup" and (name is None or r.get("event") == name)
        ]

    def child_pids(self) -> dict[str, int]:
        """Each label's most recently started child pid."""
        current: dict[str, int] = {}
        for event in self.events():
            if event.get("event") in ("child_started", "child_restarted"):
                current[str(event["label"])] = int(event["pid"])
        return current

    def every_child_pid(self) -> set[int]:
        return {
            int(e["pid"])
            for e in self.events()
            if e.get("event") in ("child_started", "child_restarted")
        }


class Fleet:
    """Starts a scenario's processes with one environment and stops them all at the end."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory = directory
        self.env = env
        self.procs: list[Proc] = []
        (directory / "logs").mkdir(parents=True, exist_ok=True)

    def _spawn(self, argv: list[str], name: str, env: dict[str, str], cls: type[Proc]) -> Proc:
        log = self.directory / "logs" / f"{name}.log"
        with log.open("ab") as sink:
            popen = subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**self.env, **env},
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                start_new_session=True,
            )
        proc = cls(popen, log, name)
        self.procs.append(proc)
        return proc

    def worker(
        self, name: str, *, concurrency: int, queues: tuple[str, ...] = (), **env: str
    ) -> Proc:
        """A `taskq worker` of the chaos actors (on ``queues``, else the default queue)."""
        argv = [TASKQ_BIN, "worker", "--actors", ACTORS, "--concurrency", str(concurrency)]
        argv += [arg for queue in queues for arg in ("--queues", queue)]
        return self._spawn([*argv, "--label", name], name, env, Proc)

    def workgroup(self, name: str, toml: str, **env: str) -> Workgroup:
        path = self.directory / f"{name}.toml"
        path.write_text(toml)
        proc = self._spawn([TASKQ_BIN, "workgroup", "start", str(path)], name, env, Workgroup)
        assert isinstance(proc, Workgroup)
        return proc

    def alive(self) -> list[Proc]:
        """The processes (workers and supervisors) still running."""
        return [p for p in self.procs if p.alive()]

    async def stop(self, procs: list[Proc], timeout: float) -> dict[Proc, int | None]:
        """SIGTERM ``procs`` together; their exit codes (None: still running at the deadline)."""
        for proc in procs:
            proc.signal(signal.SIGTERM)
        codes = await asyncio.gather(*(proc.wait(timeout) for proc in procs))
        return dict(zip(procs, codes, strict=True))

    async def close(self) -> None:
        """Stop everything still running: SIGTERM, then SIGKILL; then any stray children.
        A process a scenario left SIGSTOPped is continued first, so it can see its SIGTERM."""
        running = [p for p in self.procs if p.alive()]
        for proc in running:
            proc.signal(signal.SIGCONT)
        await self.stop(running, timeout=TERMINATION_GRACE + 5)
        for proc in running:
            proc.signal(signal.SIGKILL)
            await proc.wait(5)
        for group in self.procs:
            if isinstance(group, Workgroup):
                for pid in group.every_child_pid():
                    kill_stray(pid)


def kill_stray(pid: int) -> bool:
    """SIGKILL ``pid`` if it is still a TaskQ process; whether there was one to kill."""
    if not pid_alive(pid):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    return True


def workgroup_toml(
    *,
    processes: int,
    concurrency: int,
    runtime_dir: Path,
    stale_after: float = 3.0,
    check_interval: float = 0.5,
) -> str:
    """A one-spec workgroup over the chaos actors with fast health checks and restarts."""
    return f"""\
actors = "{ACTORS}"

[defaults]
poll_interval = 0.5
max_concurrency = {concurrency}

[defaults.health]
enabled = true
check_interval = {check_interval}
stale_after = {stale_after}
start_timeout = 30

[supervisor]
backoff_initial = 0.2
backoff_max = 1
burst_limit = 20
shutdown_timeout = "{TERMINATION_GRACE + 5:g}s"
runtime_dir = "{runtime_dir}"

[[workers]]
name = "chaos"
queues = ["default"]
processes = {processes}
"""
