"""The control socket of a running workgroup: ``taskq workgroup status|stop|reload|restart``.

The supervisor serves ``control.sock`` in its runtime directory (mode 0700, so only its user
can reach it; no child label can take that name, every label ends in ``-N``). Each connection
carries one request and one answer, each a JSON line: ``{"command": "restart", "child":
"api-1"}`` -> ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``. A stop, a reload
and a restart do what SIGTERM, SIGHUP and a kill of one child would, without a pid.

``send_command`` is the other end: it finds the socket from the runtime directory and turns
"nobody there" (no directory, no socket, a socket left by a killed supervisor) into one
``WorkgroupNotRunningError`` line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from taskq_core.errors import ConfigError, TaskqError
from taskq_core.supervisor.manager import WorkgroupManager

CONTROL_SOCKET = "control.sock"
# A client that sends nothing for this long is dropped: the supervisor never waits on one.
REQUEST_TIMEOUT = 5.0
MAX_REQUEST_BYTES = 64 * 1024
COMMANDS = ("status", "stop", "reload", "restart")


class WorkgroupNotRunningError(TaskqError):
    """No supervisor answers on the runtime directory's control socket."""


class ControlCommandError(TaskqError):
    """The supervisor refused a command (its answer's ``error``)."""


def control_socket(runtime_dir: Path) -> Path:
    """Where the supervisor of ``runtime_dir`` listens."""
    return runtime_dir / CONTROL_SOCKET


def status_document(manager: WorkgroupManager) -> dict[str, Any]:
    """The group and its children as ``workgroup status --json`` prints them."""
    plan = manager.plan
    return {
        "pid": os.getpid(),
        "file": str(plan.file),
        "instance": plan.instance,
        "runtime_dir": str(plan.runtime_dir),
        "until_idle": plan.until_idle,
        "stopping": manager.stopping,
        "shutdown_timeout": plan.shutdown_timeout,
        "children": [
            {
                "label": child.label,
                "spec": child.spec,
                "state": child.state.value,
                "pid": child.pid,
                "uptime": round(child.uptime, 3) if child.uptime is not None else None,
                "restarts": child.restarts,
                "last_seen_at": child.last_seen_at.isoformat() if child.last_seen_at else None,
                "last_exit_code": child.last_exit_code,
                "restart_in": round(child.restart_in, 3) if child.restart_in is not None else None,
            }
            for child in manager.snapshot()
        ],
    }


class ControlServer:
    """Answers control requests for one manager on ``RUNTIME_DIR/control.sock``."""

    def __init__(self, manager: WorkgroupManager, runtime_dir: Path) -> None:
        self.manager = manager
        self.path = control_socket(runtime_dir)
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Listen (a socket file left by a killed supervisor is replaced: we hold the lock)."""
        self._server = await asyncio.start_unix_server(
            self._serve, path=str(self.path), limit=MAX_REQUEST_BYTES
        )
        os.chmod(self.path, 0o600)

    async def close(self) -> None:
        """Stop listening: from here on a client is told no workgroup runs."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(OSError):
            self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT)
                answer = self.handle(json.loads(line))
            except (TimeoutError, ValueError) as exc:
                answer = {"ok": False, "error": f"bad control request: {exc}"}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, OSError):
            pass  # the client went away; nothing was half-done on its behalf
        finally:
            writer.close()

    def handle(self, request: Any) -> dict[str, Any]:
        """Carry out one request and return its answer (never raises for a bad request)."""
        if not isinstance(request, dict) or request.get("command") not in COMMANDS:
            return {"ok": False, "error": f"unknown control request; expected one of {COMMANDS}"}
        command = request["command"]
        manager = self.manager
        try:
            if command == "stop":
                stopping = [c.label for c in manager.snapshot() if c.pid is not None]
                manager.request_stop("control")
                return {"ok": True, **status_document(manager), "asked_to_stop": stopping}
            if command == "reload":
                outcome = manager.reload()
                return {
                    "ok": True,
                    "started": list(outcome.started),
                    "restarted": list(outcome.restarted),
                    "stopped": list(outcome.stopped),
                    "unchanged": list(outcome.unchanged),
                }
            if command == "restart":
                child = request.get("child")
                if not isinstance(child, str):
                    return {"ok": False, "error": "restart needs a child label or spec name"}
                return {"ok": True, "restarted": manager.restart(child)}
            return {"ok": True, **status_document(manager)}
        except ConfigError as exc:
            return {"ok": False, "error": str(exc)}


@contextlib.asynccontextmanager
async def serve_control(manager: WorkgroupManager, runtime_dir: Path) -> AsyncIterator[None]:
    """Serve the control socket while the block runs."""
    server = ControlServer(manager, runtime_dir)
    await server.start()
    try:
        yield
    finally:
        await server.close()


def send_command(
    runtime_dir: Path, command: str, *, timeout: float = 10.0, **arguments: Any
) -> dict[str, Any]:
    """Send one command to the supervisor of ``runtime_dir`` and return its answer.

    Raises WorkgroupNotRunningError when nobody answers, ControlCommandError when the
    supervisor refuses the command.
    """
    path = control_socket(runtime_dir)
    nobody = f"no workgroup is running with runtime directory {runtime_dir}"
    if not runtime_dir.is_dir():
        raise WorkgroupNotRunningError(f"{nobody} (the directory does not exist)")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(timeout)
        try:
            client.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise WorkgroupNotRunningError(f"{nobody} (nothing listens on {path})") from None
        except OSError as exc:
            raise WorkgroupNotRunningError(f"{nobody} ({path}: {exc.strerror or exc})") from None
        try:
            client.sendall(json.dumps({"command": command, **arguments}).encode() + b"\n")
            with client.makefile("rb") as stream:
                line = stream.readline(MAX_REQUEST_BYTES)
        except TimeoutError:
            raise ControlCommandError(
                f"the workgroup supervisor on {path} did not answer within {timeout:g}s"
            ) from None
        except OSError as exc:
            raise ControlCommandError(f"{path}: {exc.strerror or exc}") from None
    if not line:
        raise WorkgroupNotRunningError(f"{nobody} (the supervisor closed {path} without answering)")
    answer: dict[str, Any] = json.loads(line)
    if not answer.get("ok"):
        raise ControlCommandError(str(answer.get("error") or "the supervisor refused the command"))
    return answer


def is_answering(runtime_dir: Path) -> bool:
    """Whether a supervisor still answers on ``runtime_dir`` (a stop waits for this to end)."""
    try:
        send_command(runtime_dir, "status", timeout=5.0)
    except WorkgroupNotRunningError:
        return False
    except ControlCommandError:
        return True
    return True
