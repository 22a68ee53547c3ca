"""Debian's Chromium for the browser tests, installed on first use when this runs as root.

Playwright drives the distribution's build (``/usr/bin/chromium``) instead of a browser it
downloads itself: no ``playwright install``, and the same binary an operator's machine has.
``find_chromium(install=True)`` runs ``apt-get update`` and ``apt-get install chromium`` when
the binary is missing and this process is root (CI containers are); otherwise it says how.
"""

from __future__ import annotations

import os
import shutil

from chaos.apt import AptInstallError, install_once

PACKAGE = "chromium"  # the Debian package
BINARY = "/usr/bin/chromium"


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
    try:
        install_once(PACKAGE, lambda: os.access(BINARY, os.X_OK))
    except AptInstallError as exc:
        raise ChromiumUnavailable(str(exc)) from exc
    if not os.access(BINARY, os.X_OK):
        raise ChromiumUnavailable(f"apt-get installed {PACKAGE} but {BINARY} is not there")
    return BINARY


def launch_args() -> list[str]:
    """Chromium's flags here: no sandbox as root (it needs user namespaces a root
    process in a container cannot have), shared memory in /tmp."""
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []
    # Containers give /dev/shm 64 MB, too little for Chromium's shared memory.
    return [*sandbox, "--disable-dev-shm-usage"]
