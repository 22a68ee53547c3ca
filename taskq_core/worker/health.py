"""The health server: HTTP over a Unix socket (``/live``, ``/ready``, ``/metrics``, ``/tasks``).

Kubernetes cannot httpGet a Unix socket, so probes exec ``taskq health live|ready``, which
uses ``probe`` below. ``/live`` answers while the event loop runs; ``/ready`` is 503 while
shutting down, when PostgreSQL does not answer within TASKQ_HEALTH_PG_PING_TIMEOUT, or when a
loop is stale; ``/metrics`` is Prometheus text; ``/tasks`` (opt-in) dumps task stacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable
from typing import Any

from taskq_core.worker.deps import ShutdownPhase, WorkerDeps
from taskq_core.worker.watchdog import LoopLiveness, dump_task_stacks

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class HealthServer:
    """Serves the health endpoints of one worker."""

    def __init__(self, deps: WorkerDeps, liveness: LoopLiveness, path: str) -> None:
        self.deps = deps
        self.liveness = liveness
        self.path = path
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Bind the socket (replacing a stale file left by a dead worker)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._server = await asyncio.start_unix_server(self._handle, path=self.path)

    async def stop(self) -> None:
        """Close the server and remove the socket file."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass  # headers are not needed
            parts = request.decode("latin-1").split()
            method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            status, content_type, body = await self.route(method, target)
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    async def route(self, method: str, target: str) -> tuple[int, str, bytes]:
        """Answer one request: (status, content type, body)."""
        if method != "GET":
            return 405, "application/json", b'{"error":"GET only"}'
        handlers: dict[str, Callable[[], Any]] = {
            "/live": self.live,
            "/ready": self.ready,
            "/metrics": self.metrics,
        }
        if self.deps.settings.health_tasks_enabled:
            handlers["/tasks"] = self.tasks
        handler = handlers.get(target.split("?")[0])
        if handler is None:
            return 404, "application/json", b'{"error":"not found"}'
        return await handler()  # type: ignore[no-any-return]

    async def live(self) -> tuple[int, str, bytes]:
        """200 as long as the event loop serves requests."""
        return 200, "application/json", b'{"status":"ok"}'

    async def ready(self) -> tuple[int, str, bytes]:
        """200 when running normally, PostgreSQL answers and no loop is stale."""
        deps = self.deps
        reasons = []
        if deps.shutdown_phase != ShutdownPhase.NONE:
            reasons.append("shutting_down")
        try:
            await asyncio.wait_for(deps.backend.get_leader(), deps.settings.health_pg_ping_timeout)
        except Exception:
            reasons.append("database_unreachable")
        stale = self.liveness.stale()
        if stale:
            reasons.append("stale_loops")
        started = deps.shutdown_started_at
        body = {
            "ready": not reasons,
            "reasons": reasons,
            "redis_configured": deps.settings.redis_url is not None,
            "active_jobs": len(deps.active),
            "is_leader": deps.is_leader.is_set(),
            "shutdown_phase": None if deps.shutdown_phase == 0 else deps.shutdown_phase.name,
            "shutdown_elapsed_seconds": None
            if started is None
            else round(deps.clock.monotonic() - started, 3),
            "loop_tick_ages": {k: round(v, 3) for k, v in self.liveness.ages().items()},
            "stale_loops": stale,
            "worker_id": str(deps.worker_id),
        }
        return (200 if not reasons else 503), "application/json", json.dumps(body).encode()

    async def metrics(self) -> tuple[int, str, bytes]:
        """Prometheus text exposition of this worker's gauges and counters."""
        deps = self.deps
        lines = [
            "# HELP taskq_active_jobs Currently in-flight jobs on this worker.",
            "# TYPE taskq_active_jobs gauge",
            f"taskq_active_jobs {len(deps.active)}",
            "# HELP taskq_local_queue_jobs Jobs claimed but not started yet.",
            "# TYPE taskq_local_queue_jobs gauge",
            f"taskq_local_queue_jobs {deps.local_queue.qsize()}",
            "# HELP taskq_is_leader 1 if this worker holds the maintenance leader lock.",
            "# TYPE taskq_is_leader gauge",
            f"taskq_is_leader {1 if deps.is_leader.is_set() else 0}",
            "# HELP taskq_shutdown_phase Current shutdown phase enum value (0=NONE).",
            "# TYPE taskq_shutdown_phase gauge",
            f"taskq_shutdown_phase {int(deps.shutdown_phase)}",
            "# HELP taskq_jobs_finished_total Jobs this worker finished, by outcome.",
            "# TYPE taskq_jobs_finished_total counter",
        ]
        for outcome, count in vars(deps.stats).items():
            lines.append(f'taskq_jobs_finished_total{{outcome="{outcome}"}} {count}')
        lines += [
            "# HELP taskq_loop_tick_age_seconds Seconds since each loop last ticked.",
            "# TYPE taskq_loop_tick_age_seconds gauge",
        ]
        for name, age in sorted(self.liveness.ages().items()):
            lines.append(f'taskq_loop_tick_age_seconds{{loop="{name}"}} {age:.3f}')
        return 200, "text/plain; version=0.0.4", ("\n".join(lines) + "\n").encode()

    async def tasks(self) -> tuple[int, str, bytes]:
        """Every live task's name and await sites, as JSON."""
        records = dump_task_stacks(self.deps.log, "health_tasks")
        return 200, "application/json", json.dumps({"tasks": records}).encode()


async def probe(path: str, endpoint: str, *, timeout: float = 1.0) -> tuple[int, str]:
    """GET ``endpoint`` over the Unix socket at ``path``; returns (status, body)."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_unix_connection(path)
        try:
            writer.write(f"GET {endpoint} HTTP/1.1\r\nHost: taskq\r\n\r\n".encode())
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, body.decode()
