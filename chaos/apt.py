"""Debian packages the tests drive (PgBouncer, Chromium), installed on first use.

Test processes running side by side (pytest-xdist) install one at a time, whatever the
package: dpkg takes a lock of its own and fails a second installer instead of waiting, so a
Chromium install would otherwise make a PgBouncer install beside it fail (and its tests skip).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

# apt-get update plus a package and its libraries on a slow mirror.
INSTALL_TIMEOUT = 900.0
_LOCK = Path(tempfile.gettempdir()) / "taskq-apt-install.lock"


class AptInstallError(RuntimeError):
    """apt-get failed or took too long; the message says which command and why."""


def install_once(package: str, present: Callable[[], bool]) -> None:
    """``apt-get update`` and ``apt-get install package`` unless ``present()``, asked again
    under the lock: another test process may have installed it meanwhile."""
    with _LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if present():
            return
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "--no-install-recommends", package]
        for command in (["apt-get", "update"], install):
            try:
                done = subprocess.run(
                    command, env=env, capture_output=True, text=True, check=False,
                    timeout=INSTALL_TIMEOUT,
                )  # fmt: skip
            except subprocess.TimeoutExpired as exc:
                raise AptInstallError(f"{' '.join(command)} took over {exc.timeout:g} s") from exc
            if done.returncode != 0:
                raise AptInstallError(f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}")
