"""What a backend reports for telemetry, through hooks the code that opens it installs.

A driver does not import ``taskq_core.obs``: it calls these hooks at the points worth
measuring, and ``backend.factory`` installs the OpenTelemetry ones (``obs.backend_hooks``),
in the manner of Oban's ``with_span``. A backend built without them reports nothing. Each
hook is one synchronous call with no allocation, so a notification costs what it did when the
driver counted it itself.
"""

from __future__ import annotations

from typing import Protocol


class Listener(Protocol):
    """A LISTEN connection, as a gauge sees it."""

    @property
    def connected(self) -> bool: ...


class NotifyHooks(Protocol):
    """What a backend's LISTEN connection reports."""

    def listening(self, listener: Listener) -> None:
        """The listener started: report it until ``stopped``."""

    def stopped(self, listener: Listener) -> None:
        """The listener closed."""

    def wake_received(self) -> None:
        """A notification arrived on the wake channel."""

    def event_received(self) -> None:
        """A notification arrived on the events channel."""

    def cancel_received(self) -> None:
        """An events notification asked for a cancel."""

    def reconnected(self) -> None:
        """The listener reconnected after losing its connection."""


class NoNotifyHooks:
    """Hooks that report nothing: the default of a backend built directly.

    A null object: it repeats NotifyHooks' members on purpose, each doing nothing."""

    def listening(self, listener: Listener) -> None:
        """Nothing to report."""

    def stopped(self, listener: Listener) -> None:
        """Nothing to report."""

    def wake_received(self) -> None:
        """Nothing to report."""

    def event_received(self) -> None:
        """Nothing to report."""

    def cancel_received(self) -> None:
        """Nothing to report."""

    def reconnected(self) -> None:
        """Nothing to report."""


NO_NOTIFY_HOOKS: NotifyHooks = NoNotifyHooks()
