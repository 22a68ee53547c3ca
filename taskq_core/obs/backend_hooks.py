"""The OpenTelemetry side of a backend's hooks (``backend.hooks``): the LISTEN connection's
counters and its ``taskq.notify.connected`` gauge. ``backend.factory`` installs them on every
backend it opens, so the driver itself imports nothing from ``obs``."""

from __future__ import annotations

from taskq_core.backend.hooks import Listener
from taskq_core.obs.gauges import forget_listener, watch_listener
from taskq_core.obs.metrics import instruments, labels

_WAKE = labels(**{"taskq.notify.channel": "wake"})
_EVENTS = labels(**{"taskq.notify.channel": "events"})


class NotifyMetrics:
    """``NotifyHooks`` that count notifications and reconnects and watch the listener."""

    def listening(self, listener: Listener) -> None:
        """Report the listener in the connected gauge until it stops."""
        watch_listener(listener)

    def stopped(self, listener: Listener) -> None:
        """A closed listener is no longer reported."""
        forget_listener(listener)

    def wake_received(self) -> None:
        """Count a wake notification."""
        instruments().notify_received.add(1, _WAKE)

    def event_received(self) -> None:
        """Count an events notification."""
        instruments().notify_received.add(1, _EVENTS)

    def cancel_received(self) -> None:
        """Count a cancel notification."""
        instruments().notify_cancel_received.add(1)

    def reconnected(self) -> None:
        """Count a reconnect."""
        instruments().notify_reconnects.add(1)
