"""The confirmation dialogs every dashboard action goes through.

ConfirmScreen: y confirms, n or Esc backs out. ReasonScreen (a pause): the operator types
why (or nothing) and Enter confirms, Esc backs out; letters go to the reason, so it has no
y/n keys.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input

from taskq_cli.tui.literal import LiteralStatic


def _question(question: str, detail: str) -> ComposeResult:
    """The dialog's question and, when given, what confirming will do."""
    yield LiteralStatic(question, id="confirm-question")
    if detail:
        yield LiteralStatic(detail, id="confirm-detail")


def _buttons(confirm: str, back_out: str) -> ComposeResult:
    """The confirm button and the back-out button, under these labels."""
    with Horizontal(id="confirm-buttons"):
        yield Button(confirm, variant="error", id="confirm-yes")
        yield Button(back_out, variant="primary", id="confirm-no")


class ConfirmScreen(ModalScreen[bool]):
    """Ask one question; dismiss with True (confirmed) or False."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "Cancel"),
    ]

    def __init__(self, question: str, detail: str = "") -> None:
        super().__init__()
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        """The question, what it will do, and the two buttons (No focused)."""
        with Vertical(id="confirm-dialog"):
            yield from _question(self.question, self.detail)
            yield from _buttons("Yes (y)", "No (n)")

    def on_mount(self) -> None:
        """Enter on the default button must not do anything irreversible."""
        self.query_one("#confirm-no", Button).focus()

    def action_answer(self, confirmed: bool) -> None:
        """Close the dialog with the answer."""
        self.dismiss(confirmed)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm-yes")


class ReasonScreen(ModalScreen[str | None]):
    """Ask one question with a free-text reason; dismiss with the reason (empty when none
    was typed) to confirm, or None to back out."""

    BINDINGS = [Binding("escape", "back_out", "Cancel")]

    def __init__(self, question: str, detail: str = "", placeholder: str = "reason") -> None:
        super().__init__()
        self.question = question
        self.detail = detail
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        """The question, what it will do, the reason line (focused) and the two buttons."""
        with Vertical(id="confirm-dialog"):
            yield from _question(self.question, self.detail)
            yield Input(placeholder=self.placeholder, id="confirm-reason")
            yield from _buttons("OK (Enter)", "Cancel (Esc)")

    def on_mount(self) -> None:
        """Typing goes to the reason at once."""
        self.query_one("#confirm-reason", Input).focus()

    @property
    def reason(self) -> str:
        """The reason typed so far, trimmed."""
        return self.query_one("#confirm-reason", Input).value.strip()

    def action_back_out(self) -> None:
        """Close the dialog without doing anything."""
        self.dismiss(None)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(self.reason)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(self.reason if event.button.id == "confirm-yes" else None)
