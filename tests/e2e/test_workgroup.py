"""`taskq workgroup start` with real children on a real PostgreSQL.

Each test writes a workgroup TOML into its temp dir and runs the installed `taskq` on it. The
supervisor's JSON log lines (stderr) are collected by a reader thread; tests wait on them and
on the `workers` table with deadline polling, never with bare sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.protocol import EnqueueArgs, JobFilter, WorkerRow
from taskq_core.statemachine import JobStatus
from tests.conftest import TASKQ_BIN, PgTarget

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
ACTORS = "tests.e2e.e2e_actors:registry"
# Children: fast heartbeats and short graces, quiet logs (set through [defaults.env]).
CHILD_ENV = """\
[defaults.env]
TASKQ_HEARTBEAT_INTERVAL = 0.5
TASKQ_LOCK_LEASE = 5
TASKQ_CANCELLATION_GRACE_PERIOD = 1
TASKQ_CLEANUP_GRACE_PERIOD = 1
TASKQ_SCHEDULED_WAKE_INTERVAL = 0.2
TASKQ_IDLE_SETTLE_WINDOW = 0.3
TASKQ_IDLE_POLL_INTERVAL = 0.1
TASKQ_HEALTH_ENABLED = false
TASKQ_LOG_LEVEL = "WARNING"
"""
FAST_SUPERVISOR = """\
[supervisor]
backoff_initial = 0.2
backoff_max = 1
shutdown_timeout = "15s"
"""


def toml(workers: str, *, supervisor: str = FAST_SUPERVISOR, defaults_env: str = CHILD_ENV) -> str:
    """A workgroup file over the e2e actors."""
    return f'actors = "{ACTORS}"\n\n{defaults_env}\n{supervisor}\n{workers}'


class Supervisor:
    """One running `taskq workgroup start` and the lifecycle events it has logged so far."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.events: list[dict[str, Any]] = []
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def close(self) -> None:
        """Wait for the output to end (every child gone) and release the pipe."""
        self._reader.join(10)
        assert self.process.stderr is not None
        self.process.stderr.close()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip())
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("component") == "workgroup":
                self.events.append(record)

    def named(self, event: str, **match: Any) -> list[dict[str, Any]]:
        """Events called ``event`` whose fields include ``match``."""
        return [
            e
            for e in list(self.events)
            if e["event"] == event and all(e.get(k) == v for k, v in match.items())
        ]

    @property
    def instance(self) -> str:
        return str(self.named("workgroup_started")[0]["instance"])

    def pids(self) -> set[int]:
        """Every child pid the supervisor ever started."""
        return {
            int(e["pid"])
            for e in list(self.events)
            if e["event"] in ("child_started", "child_restarted")
        }

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.lines[-n:])


async def poll_for(
    check: Callable[[], Awaitable[T | None] | T | None],
    *,
    timeout: float,
    what: str,
    supervisor: Supervisor | None = None,
) -> T:
    """Call ``check`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() > deadline:
            output = f"\n--- supervisor output ---\n{supervisor.tail()}" if supervisor else ""
            pytest.fail(f"timed out after {timeout}s waiting for {what}{output}")
        await asyncio.sleep(0.1)


def alive(pid: int) -> bool:
    """Whether a TaskQ worker process with this pid is still running."""
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and "taskq_cli" in process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


@pytest.fixture
async def backend(pg: PgTarget) -> AsyncIterator[PostgresBackend]:
    db = await PostgresBackend.connect(pg.dsn, pg.schema, max_size=3)
    yield db
    await db.close()


@pytest.fixture
def start_workgroup(pg: PgTarget, tmp_path: Path) -> Iterator[Callable[..., Supervisor]]:
    """Start `taskq workgroup start FILE ...`; stop it (and anything it left) afterwards."""
    started: list[Supervisor] = []

    def start(text: str, *args: str, **env: str) -> Supervisor:
        path = tmp_path / f"group{len(started)}.toml"
        path.write_text(text)
        process = subprocess.Popen(
            [TASKQ_BIN, "workgroup", "start", str(path), *args],
            cwd=ROOT,
            env=pg.env(TASKQ_LOG_FORMAT="json", TASKQ_LOG_LEVEL="INFO", **env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        supervisor = Supervisor(process)
        started.append(supervisor)
        return supervisor

    yield start
    for supervisor in started:
        if supervisor.process.poll() is None:
            supervisor.process.send_signal(signal.SIGTERM)
            try:
                supervisor.process.wait(20)
            except subprocess.TimeoutExpired:
                supervisor.process.kill()
                supervisor.process.wait(5)
        for pid in supervisor.pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        supervisor.close()


async def workers_of(backend: PostgresBackend, instance: str) -> dict[str, WorkerRow]:
    """The running worker rows of one workgroup instance, by label, most recently seen.

    A child killed with SIGKILL never marks its row stopped: its label then has two rows.
    """
    latest: dict[str, WorkerRow] = {}
    for row in await backend.list_workers():  # most recently seen first
        if row.workgroup_instance == instance and row.status == "running":
            latest.setdefault(row.label or "", row)
    return latest


async def registered(
    backend: PostgresBackend, supervisor: Supervisor, labels: set[str]
) -> dict[str, WorkerRow]:
    """Wait until every label has a running row whose pid is that child's current pid."""

    async def check() -> dict[str, WorkerRow] | None:
        if not supervisor.named("workgroup_started"):
            return None
        current: dict[str, int] = {}
        for event in list(supervisor.events):
            if event["event"] in ("child_started", "child_restarted"):
                current[event["label"]] = int(event["pid"])
        rows = {
            (row.label, row.pid): row
            for row in await backend.list_workers()
            if row.workgroup_instance == supervisor.instance and row.status == "running"
        }
        if set(current) >= labels and all((label, current[label]) in rows for label in labels):
            return {label: rows[(label, current[label])] for label in labels}
        return None

    return await poll_for(
        check, timeout=30, what=f"{sorted(labels)} registered", supervisor=supervisor
    )


async def all_terminal(backend: PostgresBackend, count: int) -> list[Any]:
    jobs = await backend.list_jobs(JobFilter(limit=None))
    done = [j for j in jobs if j.status in (JobStatus.SUCCEEDED, JobStatus.FAILED)]
    return done if len(done) == count else []


async def stop(supervisor: Supervisor, timeout: float = 20) -> int:
    supervisor.process.send_signal(signal.SIGTERM)
    return await asyncio.to_thread(supervisor.process.wait, timeout)


async def test_children_register_process_jobs_and_all_exit_on_sigterm(
    backend: PostgresBackend, start_workgroup: Callable[..., Supervisor]
) -> None:
    supervisor = start_workgroup(
        toml(
            '[[workers]]\nname = "main"\nqueues = ["default"]\nprocesses = 2\n'
            '[[workers]]\nname = "side"\nqueues = ["fair"]\nmax_concurrency = 2\n'
        )
    )
    rows = await registered(backend, supervisor, {"main-1", "main-2", "side-1"})
    assert {row.hostname for row in rows.values()} == {socket.gethostname()}
    assert rows["side-1"].queues == ["fair"] and rows["side-1"].concurrency == 2
    assert rows["main-1"].pid != rows["main-2"].pid

    await backend.enqueue_batch(
        [EnqueueArgs("echo", {"n": i}) for i in range(60)]
        + [EnqueueArgs("fair", {}, queue="fair") for _ in range(10)]
    )
    jobs = await poll_for(
        lambda: all_terminal(backend, 70), timeout=30, what="70 jobs done", supervisor=supervisor
    )
    assert {j.status for j in jobs} == {JobStatus.SUCCEEDED}

    assert await stop(supervisor) == 0
    assert {e["reason"] for e in supervisor.named("child_exited")} == {"shutdown"}
    assert supervisor.named("workgroup_stopped")[0]["exit_code"] == 0
    assert not [pid for pid in supervisor.pids() if alive(pid)]
    assert await workers_of(backend, supervisor.instance) == {}  # every row marked stopped


async def test_a_child_killed_with_sigkill_is_replaced_by_a_new_pid(
    backend: PostgresBackend, start_workgroup: Callable[..., Supervisor]
) -> None:
    supervisor = start_workgroup(toml('[[workers]]\nname = "main"\nqueues = ["default"]\n'))
    old = (await registered(backend, supervisor, {"main-1"}))["main-1"].pid
    os.kill(old, signal.SIGKILL)
    (restarted,) = await poll_for(
        lambda: supervisor.named("child_restarted", label="main-1"),
        timeout=10,
        what="main-1 restarted",
        supervisor=supervisor,
    )
    assert restarted["previous_pid"] == old and restarted["pid"] != old
    exited = supervisor.named("child_exited", label="main-1")[0]
    assert exited["signal"] == "SIGKILL" and exited["reason"] == "exited"
    rows = await registered(backend, supervisor, {"main-1"})
    assert rows["main-1"].pid == restarted["pid"]
    row = await backend.enqueue(EnqueueArgs("echo", {"after": "restart"}))
    await poll_for(
        lambda: all_terminal(backend, 1), timeout=15, what="the job done", supervisor=supervisor
    )
    assert (await backend.get(row.id)).status is JobStatus.SUCCEEDED  # type: ignore[union-attr]


async def test_a_sigkilled_childs_row_is_stopped_with_the_signal_by_its_supervisor(
    backend: PostgresBackend, start_workgroup: Callable[..., Supervisor]
) -> None:
    supervisor = start_workgroup(toml('[[workers]]\nname = "main"\nqueues = ["default"]\n'))
    killed = (await registered(backend, supervisor, {"main-1"}))["main-1"]
    os.kill(killed.pid, signal.SIGKILL)

    async def stopped() -> WorkerRow | None:
        row = next((w for w in await backend.list_workers() if w.id == killed.id), None)
        return row if row is not None and row.status == "stopped" else None

    # Stopped at once by the supervisor, not left running until it ages into stale.
    row = await poll_for(stopped, timeout=10, what="the killed row stopped", supervisor=supervisor)
    assert (row.exit_signal, row.exit_code) == ("SIGKILL", None)
    assert row.stopped_at is not None and row.stopped_at >= row.last_seen_at
    [exited] = supervisor.named("child_exited", label="main-1")
    assert exited["worker_id"] == str(killed.id)
    # Its replacement registers under a new id, running.
    fresh = (await registered(backend, supervisor, {"main-1"}))["main-1"]
    assert fresh.id != killed.id and fresh.status == "running" and fresh.exit_signal is None
    assert await stop(supervisor) == 0
    rows = {w.id: w for w in await backend.list_workers()}
    assert (rows[fresh.id].status, rows[fresh.id].exit_code) == ("stopped", 0)


async def test_a_frozen_child_is_found_stale_by_last_seen_at_killed_and_restarted(
    backend: PostgresBackend, start_workgroup: Callable[..., Supervisor]
) -> None:
    supervisor = start_workgroup(
        toml(
            '[[workers]]\nname = "main"\nqueues = ["default"]\nprocesses = 2\n'
            "[workers.health]\ncheck_interval = 0.5\nstale_after = 3\n"
        )
    )
    rows = await registered(backend, supervisor, {"main-1", "main-2"})
    frozen, other = rows["main-1"].pid, rows["main-2"].pid
    os.kill(frozen, signal.SIGSTOP)  # alive, but its heartbeat stops
    (killed,) = await poll_for(
        lambda: supervisor.named("child_stale_killed", label="main-1"),
        timeout=15,
        what="main-1 found stale",
        supervisor=supervisor,
    )
    assert killed["pid"] == frozen and killed["registered"] is True
    assert killed["unchanged_for"] >= 3
    (restarted,) = await poll_for(
        lambda: supervisor.named("child_restarted", label="main-1"),
        timeout=10,
        what="main-1 restarted",
        supervisor=supervisor,
    )
    assert restarted["previous_pid"] == frozen
    exited = supervisor.named("child_exited", label="main-1")[0]
    assert exited["reason"] == "stale_killed" and exited["signal"] == "SIGKILL"
    rows = await registered(backend, supervisor, {"main-1", "main-2"})
    assert rows["main-1"].pid == restarted["pid"] and rows["main-2"].pid == other
    assert not supervisor.named("child_stale_killed", label="main-2")
    assert not alive(frozen)


async def test_a_crash_looping_spec_is_given_up_while_another_keeps_working(
    backend: PostgresBackend, start_workgroup: Callable[..., Supervisor]
) -> None:
    supervisor = start_workgroup(
        toml(
            '[[workers]]\nname = "good"\nqueues = ["default"]\n'
            '[[workers]]\nname = "broken"\nqueues = ["default"]\n'
            'actors = "tests.e2e.no_such_actors_module:registry"\n',
            supervisor=FAST_SUPERVISOR + "burst_limit = 2\nburst_window = 60\n",
        )
    )
    good = (await registered(backend, supervisor, {"good-1"}))["good-1"].pid
    (given_up,) = await poll_for(
        lambda: supervisor.named("spec_given_up"),
        timeout=30,
        what="the broken spec given up",
        supervisor=supervisor,
    )
    assert given_up["spec"] == "broken" and given_up["last_exit_code"] == 1
    broken_runs = [e for e in supervisor.events if e.get("label") == "broken-1"]
    assert len([e for e in broken_runs if e["event"] in ("child_started", "child_restarted")]) == 3
    broken_exits = supervisor.named("child_exited", label="broken-1")
    assert all(e["exit_code"] == 1 and e["outcome"] == "error" for e in broken_exits)

    await backend.enqueue_batch([EnqueueArgs("echo", {"n": i}) for i in range(20)])
    jobs = await poll_for(
        lambda: all_terminal(backend, 20), timeout=20, what="20 jobs done", supervisor=supervisor
    )
    assert {j.status for j in jobs} == {JobStatus.SUCCEEDED}
    assert supervisor.process.poll() is None
    assert not supervisor.named("child_exited", label="good-1")
    assert (await workers_of(backend, supervisor.instance))["good-1"].pid == good
    assert await stop(supervisor) == 0


async def test_until_idle_the_group_drains_its_queues_and_reports_failures(
    backend: PostgresBackend, start_workgroup: Callable[..., Supervisor]
) -> None:
    await backend.enqueue_batch(
        [EnqueueArgs("echo", {"n": i}) for i in range(40)]
        + [EnqueueArgs("fair", {}, queue="fair") for _ in range(5)]
        + [EnqueueArgs("explode", {})]
    )
    supervisor = start_workgroup(
        toml(
            '[[workers]]\nname = "main"\nqueues = ["default"]\nprocesses = 2\n'
            '[[workers]]\nname = "side"\nqueues = ["fair"]\n'
        ),
        "--until-idle",
    )
    code = await asyncio.to_thread(supervisor.process.wait, 60)
    assert code == 3, supervisor.tail()  # explode failed for good in one of the children
    (drained,) = supervisor.named("workgroup_drained")
    assert sorted(drained["children"].values()) == [0, 0, 3]
    jobs = await backend.list_jobs(JobFilter(limit=None))
    statuses = [j.status for j in jobs]
    assert statuses.count(JobStatus.SUCCEEDED) == 45 and statuses.count(JobStatus.FAILED) == 1
    assert not [pid for pid in supervisor.pids() if alive(pid)]


async def test_a_child_ignoring_sigterm_is_sigkilled_after_the_shutdown_timeout(
    backend: PostgresBackend, start_workgroup: Callable[..., Supervisor], tmp_path: Path
) -> None:
    (tmp_path / "stubborn_actors.py").write_text(
        "import time\n"
        "from taskq_core import actor\n\n"
        "@actor\n"
        "def stubborn(payload: dict) -> None:\n"
        "    open(payload['marker'], 'w').close()  # the job really started\n"
        "    time.sleep(60)  # a thread cannot be cancelled: shutdown must wait for it\n\n"
        "registry = [stubborn]\n"
    )
    slow_shutdown = "[workers.env]\nTASKQ_CANCELLATION_GRACE_PERIOD = 30\nTASKQ_LOCK_LEASE = 40\n"
    supervisor = start_workgroup(
        toml(
            '[[workers]]\nname = "main"\nqueues = ["default"]\n'
            'actors = "stubborn_actors:registry"\n' + slow_shutdown,
            supervisor='[supervisor]\nshutdown_timeout = "1s"\n',
        ),
        PYTHONPATH=str(tmp_path),
    )
    pid = (await registered(backend, supervisor, {"main-1"}))["main-1"].pid
    marker = tmp_path / "started"
    job = await backend.enqueue(EnqueueArgs("stubborn", {"marker": str(marker)}))

    async def running() -> bool:
        # Claimed is not enough (a claimed job can still wait in the local queue, and a
        # shutdown hands it back): wait until the actor itself has started.
        row = await backend.get(job.id)
        return row is not None and row.status is JobStatus.RUNNING and marker.exists()

    await poll_for(running, timeout=15, what="the stubborn job running", supervisor=supervisor)
    started = time.monotonic()
    assert await stop(supervisor) == 0
    assert time.monotonic() - started < 10
    (killed,) = supervisor.named("child_killed", label="main-1")
    assert killed["reason"] == "shutdown_timeout" and killed["pid"] == pid
    assert supervisor.named("child_exited", label="main-1")[0]["signal"] == "SIGKILL"
    assert not alive(pid)


def test_on_a_terminal_a_live_table_shows_the_children(pg: PgTarget, tmp_path: Path) -> None:
    import pexpect

    path = tmp_path / "group.toml"
    path.write_text(toml('[[workers]]\nname = "main"\nqueues = ["default"]\nprocesses = 2\n'))
    logs = tmp_path / "logs"
    child = pexpect.spawn(
        TASKQ_BIN,
        ["workgroup", "start", str(path), "--until-idle", "--log-dir", str(logs)],
        cwd=str(ROOT),
        env={**pg.env(), "TERM": "xterm-256color"},
        encoding="utf-8",
        dimensions=(40, 160),
        timeout=60,
    )
    child.expect("restarts")  # the table's header ...
    child.expect("main-2")  # ... and its rows
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0  # nothing to drain: every child exits 0
    assert "finished" in (child.before or "")
    assert {p.name for p in logs.iterdir()} == {"main-1.log", "main-2.log"}


async def test_a_sigkilled_supervisor_takes_its_children_down_gracefully(
    backend: PostgresBackend, start_workgroup: Callable[..., Supervisor]
) -> None:
    supervisor = start_workgroup(
        toml('[[workers]]\nname = "main"\nqueues = ["default"]\nprocesses = 2\n')
    )
    rows = await registered(backend, supervisor, {"main-1", "main-2"})
    pids = {row.pid for row in rows.values()}
    assert all(alive(pid) for pid in pids)

    supervisor.process.kill()  # SIGKILL: the supervisor gets no chance to stop anyone
    await asyncio.to_thread(supervisor.process.wait, 10)
    await poll_for(
        lambda: not any(alive(pid) for pid in pids),
        timeout=30,
        what=f"children {sorted(pids)} gone after the supervisor died",
        supervisor=supervisor,
    )
    by_pid = {
        row.pid: row
        for row in await backend.list_workers()
        if row.workgroup_instance == supervisor.instance
    }
    assert {pid: by_pid[pid].status for pid in pids} == dict.fromkeys(pids, "stopped")


async def test_a_refused_second_supervisor_leaves_the_running_groups_sockets(
    backend: PostgresBackend,
    start_workgroup: Callable[..., Supervisor],
    pg: PgTarget,
) -> None:
    runtime = Path(tempfile.mkdtemp(prefix="tqwg-", dir="/tmp"))
    try:
        text = toml(
            '[[workers]]\nname = "main"\nqueues = ["default"]\n'
            "[workers.env]\nTASKQ_HEALTH_ENABLED = true\n",
            supervisor=FAST_SUPERVISOR + f'runtime_dir = "{runtime}"\n',
        )
        first = start_workgroup(text)
        await registered(backend, first, {"main-1"})
        sock = runtime / "main-1.sock"

        def live() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [TASKQ_BIN, "health", "live", "--socket", str(sock)],
                capture_output=True, text=True, timeout=10, env=pg.env(),
            )  # fmt: skip

        await poll_for(
            lambda: asyncio.to_thread(lambda: live().returncode == 0),
            timeout=15,
            what="main-1's health socket answering",
            supervisor=first,
        )
        second = start_workgroup(text)
        code = await asyncio.to_thread(second.process.wait, 30)
        assert code == 1, second.tail()
        assert any("another workgroup supervisor" in line for line in second.lines)
        assert not second.pids()  # it started no child
        assert sock.exists()
        probe = await asyncio.to_thread(live)
        assert probe.returncode == 0, probe.stderr
        assert json.loads(probe.stdout) == {"status": "ok"}
        assert await stop(first) == 0
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def workgroup_cli(pg: PgTarget, *args: str) -> subprocess.CompletedProcess[str]:
    """`taskq workgroup ARGS` from another shell (the operator's), as a subprocess."""
    return subprocess.run(
        [TASKQ_BIN, "workgroup", *args],
        cwd=ROOT, env=pg.env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


async def test_a_crash_looping_childs_log_carries_each_crashs_traceback_in_one_event(
    start_workgroup: Callable[..., Supervisor], tmp_path: Path
) -> None:
    (tmp_path / "broken_actors.py").write_text(
        "def _connect() -> None:\n"
        "    raise RuntimeError('cannot reach the payment gateway')\n\n"
        "_connect()\n"
        "registry = []\n"
    )
    logs = tmp_path / "logs"
    supervisor = start_workgroup(
        toml(
            '[[workers]]\nname = "broken"\nqueues = ["default"]\n'
            'actors = "broken_actors:registry"\n',
            supervisor=FAST_SUPERVISOR + "burst_limit = 1\nburst_window = 60\n",
        ),
        "--log-dir",
        str(logs),
        PYTHONPATH=str(tmp_path),
    )
    # Every spec given up: the group ends on its own.
    assert await asyncio.to_thread(supervisor.process.wait, 60) == 1, supervisor.tail()
    runs = len(supervisor.named("child_exited", label="broken-1"))
    assert runs == 2
    records = [json.loads(line) for line in (logs / "broken-1.log").read_text().splitlines()]
    crashes = [r for r in records if r.get("event") == "worker_crashed"]
    assert len(crashes) == runs  # one event per crash, each a single JSON line
    for crash in crashes:
        assert crash["level"] == "critical" and crash["exit_code"] == 1
        assert crash["error"] == "RuntimeError: cannot reach the payment gateway"
        trace = crash["exception"]
        assert trace.startswith("Traceback (most recent call last):")
        assert "broken_actors.py" in trace and "in _connect" in trace
        assert trace.rstrip().endswith("RuntimeError: cannot reach the payment gateway")
    assert not [r for r in records if "unexpected RuntimeError" in json.dumps(r)]


async def test_an_operator_controls_a_running_group_from_another_shell(
    backend: PostgresBackend,
    start_workgroup: Callable[..., Supervisor],
    pg: PgTarget,
    tmp_path: Path,
) -> None:
    workers = '[[workers]]\nname = "main"\nqueues = ["default"]\nprocesses = {n}\n'
    supervisor = start_workgroup(toml(workers.format(n=1)))
    path = tmp_path / "group0.toml"
    first = (await registered(backend, supervisor, {"main-1"}))["main-1"].pid

    status = await asyncio.to_thread(workgroup_cli, pg, "status", str(path), "--json")
    assert status.returncode == 0, status.stderr
    document = json.loads(status.stdout)
    assert document["pid"] == supervisor.process.pid
    assert document["instance"] == supervisor.instance
    assert [(c["label"], c["state"], c["pid"]) for c in document["children"]] == [
        ("main-1", "running", first)
    ]
    table = await asyncio.to_thread(workgroup_cli, pg, "status", str(path))
    assert "main-1" in table.stdout and str(first) in table.stdout

    restart = await asyncio.to_thread(workgroup_cli, pg, "restart", str(path), "main-1")
    assert restart.returncode == 0 and "restarting main-1" in restart.stdout, restart.stderr
    (restarted,) = await poll_for(
        lambda: supervisor.named("child_restarted", label="main-1"),
        timeout=20,
        what="main-1 restarted",
        supervisor=supervisor,
    )
    assert restarted["previous_pid"] == first
    assert supervisor.named("child_exited", label="main-1")[0]["reason"] == "restart_requested"
    assert supervisor.named("child_exited", label="main-1")[0]["exit_code"] == 0  # graceful
    second = (await registered(backend, supervisor, {"main-1"}))["main-1"].pid
    assert second == restarted["pid"] != first

    path.write_text(toml(workers.format(n=2)))
    reload = await asyncio.to_thread(workgroup_cli, pg, "reload", str(path), "--json")
    assert reload.returncode == 0, reload.stderr
    assert json.loads(reload.stdout) == {
        "started": ["main-2"], "restarted": [], "stopped": [], "unchanged": ["main-1"],
    }  # fmt: skip
    rows = await registered(backend, supervisor, {"main-1", "main-2"})
    assert rows["main-1"].pid == second  # an unchanged child keeps running

    unknown = await asyncio.to_thread(workgroup_cli, pg, "restart", str(path), "main-9")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.count("\n") == 1 and "no child or spec 'main-9'" in unknown.stderr

    # SIGHUP is the same reload (systemd's ExecReload): main-2 leaves the file, and the group.
    path.write_text(toml(workers.format(n=1)))
    supervisor.process.send_signal(signal.SIGHUP)
    (removed,) = await poll_for(
        lambda: supervisor.named("child_exited", label="main-2", reason="removed"),
        timeout=20,
        what="main-2 stopped by the reload",
        supervisor=supervisor,
    )
    assert removed["exit_code"] == 0
    assert supervisor.named("workgroup_reloaded")[-1]["unchanged"] == ["main-1"]

    # An operator midway through editing the file can still ask the running group and stop
    # it: neither needs the file, only the supervisor it names.
    path.write_text('[[workers]]\nname = "main\nqueues = [')
    midway = await asyncio.to_thread(workgroup_cli, pg, "status", str(path), "--json")
    assert midway.returncode == 0, midway.stderr
    assert json.loads(midway.stdout)["pid"] == supervisor.process.pid
    stop_ = await asyncio.to_thread(workgroup_cli, pg, "stop", str(path))
    assert stop_.returncode == 0, stop_.stderr
    assert "stopped (1 child)" in stop_.stdout
    # `stop` returned once the group was down: the supervisor exits as on SIGTERM.
    assert await asyncio.to_thread(supervisor.process.wait, 10) == 0
    assert supervisor.named("workgroup_stopping")[0]["reason"] == "control"
    assert {e["reason"] for e in supervisor.named("child_exited")} >= {"shutdown"}
    assert not [pid for pid in supervisor.pids() if alive(pid)]

    path.write_text(toml(workers.format(n=1)))
    gone = await asyncio.to_thread(workgroup_cli, pg, "status", str(path))
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1
    assert gone.stderr.startswith("error: no workgroup is running with runtime directory")
