"""Debian's Chromium for the browser tests, installed on first use when this runs as root.

Playwright drives the distribution's build (``/usr/bin/chromium``) instead of a browser it
downloads itself: no ``playwright install``, and the same binary an operator's machine has.
``find_chromium(install=True)`` runs ``apt-get update`` and ``apt-get install chromium`` when
the binary is missing and this process is root (CI containers are); otherwise it says how.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

PACKAGE = "chromium"  # the Debian package
BINARY = "/usr/bin/chromium"
# apt-get update plus the package and its libraries on a slow mirror.
_INSTALL_TIMEOUT = 900.0
# Test processes running side by side (pytest-xdist) install one at a time: dpkg takes a
# lock of its own and fails the second instead of waiting.
_INSTALL_LOCK = Path(tempfile.gettempdir()) / "taskq-chromium-install.lock"


class ChromiumUnavailable(RuntimeError):
    """No Chromium here, and it could not be installed."""


def find_chromium(*, install: bool = False) -> str:
    """The Chromium binary; with ``install``, as root, ``apt-get install`` it when missing."""
    if os.access(BINARY, os.X_OK):
        return BINARY
    if not install or os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ChromiumUnavailable(
            f"{BINARY} is missing (Debian: apt-get install {PACKAGE}); the tests install it "
            "themselves only when run as root on a system with apt-get"
        )
    with _INSTALL_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.access(BINARY, os.X_OK):  # another process may have installed it
            _apt_install()
    if not os.access(BINARY, os.X_OK):
        raise ChromiumUnavailable(f"apt-get installed {PACKAGE} but {BINARY} is not there")
    return BINARY


def _apt_install() -> None:
    """apt-get update, then install the package without its recommendations."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install_package = ["apt-get", "install", "-y", "--no-install-recommends", PACKAGE]
    for command in (["apt-get", "update"], install_package):
        try:
            done = subprocess.run(
                command,
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=_INSTALL_TIMEOUT,
            )
        except subprocess.TimeoutExpired as exc:
            raise ChromiumUnavailable(f"{' '.join(command)} took over {exc.timeout:g} s") from exc
        if done.returncode != 0:
            raise ChromiumUnavailable(f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}")


def launch_args() -> list[str]:
    """Chromium's flags here: no sandbox as root (it needs user namespaces a root
    process in a container cannot have), shared memory in /tmp."""
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []
    # Containers give /dev/shm 64 MB, too little for Chromium's shared memory.
    return [*sandbox, "--disable-dev-shm-usage"]
