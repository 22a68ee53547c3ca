"""The health server: HTTP over a Unix socket (``/live``, ``/ready``, ``/metrics``, ``/tasks``),
and over TCP too when TASKQ_HEALTH_PORT is set (``/live``, ``/ready``, ``/metrics`` only).

Kubernetes cannot httpGet a Unix socket, so exec probes run ``taskq health live|ready``, which
uses ``probe`` below; with TASKQ_HEALTH_PORT, httpGet probes and Prometheus scrapes need no
exec. The port binds TASKQ_HEALTH_HOST, loopback unless a pod asks for more. ``/live``
answers while the event loop runs, whatever the database does; ``/ready`` is 503 while
shutting down, while the database is away (an outage seen by any loop, or no answer to a
ping within TASKQ_HEALTH_PG_PING_TIMEOUT), or when a loop is stale; ``/metrics`` is the
OpenTelemetry meters in Prometheus text (``obs.telemetry``); ``/tasks`` (opt-in) dumps task
stacks, on the socket only: stacks are for whoever can reach the worker's machine.

Slow clients cannot take the server down: a request's head must arrive within
REQUEST_DEADLINE (in all, not per line) and its answer be taken within as long, and each
listener holds at most MAX_CONNECTIONS connections, a newcomer past that taking the place
of one still waiting for its request (taskq_core/connection_cap.py), so a flood on the port
crowds out neither the kubelet's probe nor the socket's.

Each worker has a socket of its own: TASKQ_HEALTH_SOCKET_PATH (the workgroup passes one per
child), else ``worker-<pid>.sock`` in the runtime directory (``$XDG_RUNTIME_DIR/taskq``, else
``/tmp/taskq-<uid>``), where ``taskq health`` finds it. A socket that a live process serves is
never taken over (``HealthSocketInUseError``); a stale file left by a dead one is replaced, and
a worker removes its socket on the way out only if the file is still its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import socket
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskq_core.connection_cap import ConnectionCap
from taskq_core.errors import TRANSIENT_ERRORS, ConfigError, HealthSocketInUseError
from taskq_core.obs.telemetry import metrics_registry, render_metrics
from taskq_core.worker.deps import WorkerDeps
from taskq_core.worker.state import ShutdownPhase
from taskq_core.worker.watchdog import LoopLiveness, dump_task_stacks

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
SOCKET_PREFIX = "worker-"
SOCKET_SUFFIX = ".sock"
# How long an existing socket gets to accept a connection before it counts as served.
IN_USE_CONNECT_TIMEOUT = 1.0
# How long a request's head may take to arrive, in all, and its answer to be taken.
REQUEST_DEADLINE = 5.0
# Connections each listener (the socket, the port) holds at most; probes need a few.
MAX_CONNECTIONS = 64
# Header lines read past the request line before the request is dropped.
MAX_HEADER_LINES = 100
# The listen backlog, which is also how many connections asyncio accepts in one go: kept
# small, so a burst of connections cannot take more files than the cap has room to close.
ACCEPT_BURST = 16
_HEAD_END = (b"\r\n", b"\n")
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
NO_METRICS = (
    b"# No OpenTelemetry meters feed this endpoint: TASKQ_OTEL_ENABLED=false or "
    b"OTEL_SDK_DISABLED=true, or the application installed its own MeterProvider without "
    b"taskq_core.obs.telemetry.metrics_reader().\n"
)


class HealthPortInUseError(ConfigError):
    """TASKQ_HEALTH_PORT is taken by another process on TASKQ_HEALTH_HOST."""


# --- where sockets live ------------------------------------------------------------------


def runtime_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where per-process health sockets live: ``$XDG_RUNTIME_DIR/taskq``, else /tmp/taskq-<uid>."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "taskq"
    return Path("/tmp") / f"taskq-{os.getuid()}"


def default_socket_path(pid: int, environ: Mapping[str, str] | None = None) -> Path:
    """The health socket of the worker with this pid when TASKQ_HEALTH_SOCKET_PATH is unset."""
    return runtime_dir(environ) / f"{SOCKET_PREFIX}{pid}{SOCKET_SUFFIX}"


def ensure_runtime_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700) if needed; refuse a directory another user owns."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        owner = path.stat().st_uid
    except OSError as exc:
        message = f"cannot use health socket directory {path}: {exc.strerror or exc}"
        raise ConfigError(message) from None
    if owner != os.getuid():
        raise ConfigError(f"health socket directory {path} belongs to another user")
    return path


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user
    return True


def discover_sockets(directory: Path | None = None) -> dict[int, Path]:
    """The ``worker-<pid>.sock`` files in ``directory`` whose pid is alive, by pid."""
    found: dict[int, Path] = {}
    for entry in (directory or runtime_dir()).glob(f"{SOCKET_PREFIX}*{SOCKET_SUFFIX}"):
        digits = entry.name.removeprefix(SOCKET_PREFIX).removesuffix(SOCKET_SUFFIX)
        if digits.isdigit() and pid_alive(int(digits)):
            found[int(digits)] = entry
    return dict(sorted(found.items()))


async def socket_answers(path: str, *, timeout: float = IN_USE_CONNECT_TIMEOUT) -> bool:
    """Whether some process accepts connections on the Unix socket at ``path``."""
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_unix_connection(path)
    except TimeoutError:
        return True  # its backlog is full: someone is there, just busy
    except OSError:
        return False  # refused (nobody listens) or gone
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


# --- the server --------------------------------------------------------------------------


class HealthServer:
    """Serves the health endpoints of one worker."""

    # Alike supervisor/manager.py's WorkgroupManager constructor by shape only: typed parameters.
    def __init__(
        self,
        deps: WorkerDeps,
        liveness: LoopLiveness,
        path: str | None = None,
        *,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.deps = deps
        self.liveness = liveness
        self._default_path = path is None
        self.path = str(default_socket_path(os.getpid())) if path is None else path
        # What /metrics renders; None: the one obs.telemetry set up for this process.
        self.registry = registry
        self._server: asyncio.AbstractServer | None = None
        self._tcp: asyncio.Server | None = None
        # One cap per listener: a flood on the port leaves the socket's probes alone.
        self._caps = {False: ConnectionCap(MAX_CONNECTIONS), True: ConnectionCap(MAX_CONNECTIONS)}
        self._bound: tuple[int, int] | None = None  # (st_dev, st_ino) of the file we bound

    async def start(self) -> None:
        """Bind the socket, replacing a stale file left by a dead process, then the TCP port
        when TASKQ_HEALTH_PORT is set.

        Raises HealthSocketInUseError when a live process serves the path, ConfigError when
        the path is something other than a socket, HealthPortInUseError when the port is
        taken and ConfigError when it cannot be bound otherwise.
        """
        if self._default_path:
            ensure_runtime_dir(Path(self.path).parent)
        sock = await self._bind()
        try:
            self._server = await asyncio.start_unix_server(
                self._handle, sock=sock, backlog=ACCEPT_BURST
            )
        except BaseException:
            sock.close()
            self._unlink_if_ours()
            raise
        port = self.deps.settings.health_port
        if port is not None:
            try:
                self._tcp = await self._listen_tcp(self.deps.settings.health_host, port)
            except BaseException:
                await self.stop()
                raise

    @property
    def tcp_port(self) -> int | None:
        """The TCP port served (the bound one, for TASKQ_HEALTH_PORT), or None."""
        if self._tcp is None or not self._tcp.sockets:
            return None
        return int(self._tcp.sockets[0].getsockname()[1])

    async def _listen_tcp(self, host: str, port: int) -> asyncio.Server:
        try:
            return await asyncio.start_server(self._handle_tcp, host, port, backlog=ACCEPT_BURST)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise HealthPortInUseError(
                    f"health port {host}:{port} is in use by another process; give each "
                    "worker its own TASKQ_HEALTH_PORT (or leave it unset)"
                ) from None
            raise ConfigError(
                f"cannot serve health on {host}:{port} (TASKQ_HEALTH_HOST, TASKQ_HEALTH_PORT): "
                f"{exc.strerror or exc}"
            ) from None

    async def stop(self) -> None:
        """Close the servers and remove the socket file if it is still the one we bound."""
        for server in (self._server, self._tcp):
            if server is not None:
                server.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(server.wait_closed(), 2)
        self._server = self._tcp = None
        self._unlink_if_ours()

    async def _bind(self) -> socket.socket:
        # bind() itself refuses an existing path (unlike asyncio's, which removes it first),
        # so two workers racing for one stale path cannot both end up serving it.
        for _ in range(2):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(self.path)
            except OSError as exc:
                sock.close()
                if exc.errno != errno.EADDRINUSE:
                    raise
                await self._remove_stale()
                continue
            info = os.stat(self.path)
            self._bound = (info.st_dev, info.st_ino)
            return sock
        raise self._in_use()

    async def _remove_stale(self) -> None:
        try:
            before = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(before.st_mode):
            raise ConfigError(f"health socket path {self.path} exists and is not a socket")
        if await socket_answers(self.path):
            raise self._in_use()
        with contextlib.suppress(FileNotFoundError):
            now = os.lstat(self.path)
            if (now.st_dev, now.st_ino) == (before.st_dev, before.st_ino):
                os.unlink(self.path)  # still the dead file we probed, not a newcomer's

    def _in_use(self) -> HealthSocketInUseError:
        return HealthSocketInUseError(
            f"health socket {self.path} is served by another live process; "
            "give each worker its own TASKQ_HEALTH_SOCKET_PATH (or leave it unset)"
        )

    def _unlink_if_ours(self) -> None:
        if self._bound is None:
            return
        with contextlib.suppress(FileNotFoundError):
            info = os.stat(self.path)
            if (info.st_dev, info.st_ino) == self._bound:
                os.unlink(self.path)
        self._bound = None

    async def _handle_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._handle(reader, writer, tcp=True)

    async def _handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, tcp: bool = False
    ) -> None:
        cap = self._caps[tcp]
        if not cap.admit(writer):
            writer.close()
            return
        try:
            async with asyncio.timeout(REQUEST_DEADLINE):
                request = await self._read_head(reader, writer, cap)
            if request is None:
                return  # it ended, or was cut, before its head did: nothing to answer
            cap.serving(writer)
            parts = request.decode("latin-1").split()
            method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            status, content_type, body = await self.route(method, target, tcp=tcp)
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            async with asyncio.timeout(REQUEST_DEADLINE):
                await writer.drain()
        except (TimeoutError, ConnectionError, ValueError):
            pass  # too slow, gone, or a line longer than the reader's limit
        finally:
            cap.closed(writer)
            writer.close()

    @staticmethod
    async def _read_head(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cap: ConnectionCap
    ) -> bytes | None:
        """The request line once the whole head is in (headers are not needed); None when
        the connection ended first or sent more header lines than MAX_HEADER_LINES."""
        request = await reader.readline()
        if not request.endswith(b"\n"):
            return None
        cap.stalled(writer)
        for _ in range(MAX_HEADER_LINES):
            line = await reader.readline()
            if line in _HEAD_END:
                return request
            if not line.endswith(b"\n"):
                return None
        return None

    async def route(self, method: str, target: str, *, tcp: bool = False) -> tuple[int, str, bytes]:
        """Answer one request: (status, content type, body); ``tcp``: it came over the port."""
        if method != "GET":
            return 405, "application/json", b'{"error":"GET only"}'
        handlers: dict[str, Callable[[], Any]] = {
            "/live": self.live,
            "/ready": self.ready,
            "/metrics": self.metrics,
        }
        if self.deps.settings.health_tasks_enabled and not tcp:
            handlers["/tasks"] = self.tasks
        handler = handlers.get(target.split("?")[0])
        if handler is None:
            return 404, "application/json", b'{"error":"not found"}'
        return await handler()  # type: ignore[no-any-return]

    async def live(self) -> tuple[int, str, bytes]:
        """200 as long as the event loop serves requests."""
        return 200, "application/json", b'{"status":"ok"}'

    async def ready(self) -> tuple[int, str, bytes]:
        """200 when running normally, the database is available and no loop is stale."""
        deps = self.deps
        reasons = []
        if deps.state.shutdown_phase != ShutdownPhase.NONE:
            reasons.append("shutting_down")
        database = await self.database_status()
        if not database["available"]:
            reasons.append("database_unavailable")
        stale = self.liveness.stale()
        if stale:
            reasons.append("stale_loops")
        started = deps.state.shutdown_started_at
        body = {
            "ready": not reasons,
            "reasons": reasons,
            "redis_configured": deps.settings.redis_url is not None,
            "active_jobs": len(deps.active),
            "is_leader": deps.state.is_leader.is_set(),
            "shutdown_phase": None
            if deps.state.shutdown_phase == 0
            else deps.state.shutdown_phase.name,
            "shutdown_elapsed_seconds": None
            if started is None
            else round(deps.clock.monotonic() - started, 3),
            "loop_tick_ages": {k: round(v, 3) for k, v in self.liveness.ages().items()},
            "stale_loops": stale,
            "worker_id": str(deps.worker_id),
            "database": database,
        }
        return (200 if not reasons else 503), "application/json", json.dumps(body).encode()

    async def database_status(self) -> dict[str, Any]:
        """The database as this worker sees it: ``available``, ``outage_seconds``, ``last_error``.

        An outage some loop has already seen answers at once (no query); otherwise one ping
        within TASKQ_HEALTH_PG_PING_TIMEOUT decides.
        """
        outage = self.deps.database
        error = None if outage.ongoing else await self._ping()
        if outage.ongoing:
            return {
                "available": False,
                "outage_seconds": round(outage.seconds(), 3),
                "last_error": outage.last_error,
            }
        return {"available": error is None, "outage_seconds": None, "last_error": error}

    async def _ping(self) -> str | None:
        """None when the database answers in time, else what went wrong."""
        deps = self.deps
        timeout = deps.settings.health_pg_ping_timeout
        try:
            await asyncio.wait_for(deps.backend.get_leader(), timeout)
        except TRANSIENT_ERRORS as exc:
            deps.database.failed("health_ping", exc)  # the database is away: an outage begins
            return str(exc) or type(exc).__name__
        except TimeoutError:
            return f"no answer within {timeout:g}s"
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    async def metrics(self) -> tuple[int, str, bytes]:
        """Prometheus text exposition of the OpenTelemetry meters (collected now)."""
        registry = self.registry or metrics_registry()
        if registry is None:
            return 200, METRICS_CONTENT_TYPE, NO_METRICS
        # On the loop's thread: observable instruments read the worker's state in callbacks.
        return 200, METRICS_CONTENT_TYPE, render_metrics(registry)

    async def tasks(self) -> tuple[int, str, bytes]:
        """Every live task's name and await sites, as JSON."""
        records = dump_task_stacks(self.deps.log, "health_tasks")
        return 200, "application/json", json.dumps({"tasks": records}).encode()


async def probe(path: str, endpoint: str, *, timeout: float = 1.0) -> tuple[int, str]:
    """GET ``endpoint`` over the Unix socket at ``path``; returns (status, body)."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_unix_connection(path)
        return await _get(reader, writer, endpoint)


async def probe_port(
    host: str, port: int, endpoint: str, *, timeout: float = 1.0
) -> tuple[int, str]:
    """GET ``endpoint`` from the TCP health port at ``host:port``; returns (status, body)."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, port)
        return await _get(reader, writer, endpoint)


async def _get(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, endpoint: str
) -> tuple[int, str]:
    try:
        writer.write(f"GET {endpoint} HTTP/1.1\r\nHost: taskq\r\n\r\n".encode())
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    words = head.split(b" ", 2)
    if len(words) < 2 or not words[1].isdigit():
        # A server at its connection cap gives no slot to a newcomer while every one it
        # holds is being served or just arrived: it closes the connection unanswered.
        raise ConnectionResetError("the health server closed the connection without an answer")
    return int(words[1]), body.decode()
