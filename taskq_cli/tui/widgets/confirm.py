"""The confirmation dialog every dashboard action goes through: y confirms, n or Esc backs out."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


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
            yield Static(self.question, id="confirm-question", markup=False)
            if self.detail:
                yield Static(self.detail, id="confirm-detail", markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button("Yes (y)", variant="error", id="confirm-yes")
                yield Button("No (n)", variant="primary", id="confirm-no")

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
