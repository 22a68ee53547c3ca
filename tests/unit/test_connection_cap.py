"""ConnectionCap: which connection gives way to a newcomer at the cap (a fake clock)."""

from __future__ import annotations

from taskq_core.connection_cap import ConnectionCap


class Conn:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_stalled_connection_gives_way_before_a_fresh_one() -> None:
    clock = Clock()
    cap = ConnectionCap(2, grace=1.0, clock=clock)
    fresh, slow = Conn("fresh"), Conn("slow")
    assert cap.admit(fresh) and cap.admit(slow)
    cap.stalled(slow)
    assert cap.admit(Conn("new"))
    assert slow.closed and not fresh.closed


def test_a_fresh_connection_is_safe_for_its_grace_then_gives_way() -> None:
    clock = Clock()
    cap = ConnectionCap(1, grace=1.0, clock=clock)
    real = Conn("real")  # accepted; its request not read yet
    assert cap.admit(real)
    clock.now = 0.5
    assert not cap.admit(Conn("storm"))  # refused: the real one may still send its head
    assert not real.closed and cap.refused == 1
    clock.now = 1.0
    assert cap.admit(Conn("later"))  # a second of silence: it gives way
    assert real.closed and cap.evicted == 1


def test_a_served_connection_never_gives_way() -> None:
    cap = ConnectionCap(1, grace=0.0, clock=Clock())
    served = Conn("served")
    assert cap.admit(served)
    cap.serving(served)
    assert not cap.admit(Conn("new")) and not served.closed
