"""The runtime directory: one supervisor per directory, and the holder cleans up its sockets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taskq_core.errors import ConfigError
from taskq_core.supervisor.runtime import claim_runtime_dir


def test_a_refused_second_claim_leaves_the_running_groups_sockets_alone(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    with claim_runtime_dir(runtime):
        socket_file = runtime / "api-1.sock"
        socket_file.touch()  # a running child's health socket
        refusal = pytest.raises(ConfigError, match="another workgroup supervisor")
        with refusal as refused, claim_runtime_dir(runtime):
            pass  # pragma: no cover - the claim is refused
        assert str(os.getpid()) in str(refused.value)  # names the holder
        assert socket_file.exists()
        assert (runtime / "supervisor.lock").read_text() == f"{os.getpid()}\n"
    assert not socket_file.exists()  # the holder cleans up on its way out


def test_the_holder_removes_leftover_sockets_and_the_next_claim_succeeds(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    with claim_runtime_dir(runtime):
        (runtime / "api-1.sock").touch()
    assert list(runtime.glob("*.sock")) == []
    with claim_runtime_dir(runtime) as claimed:
        assert claimed == runtime
