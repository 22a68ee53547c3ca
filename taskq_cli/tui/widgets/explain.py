"""The explain screen: the ``taskq jobs explain`` answer for one job, in place.

``e`` on a job (in the jobs pane or on its detail screen) opens it: the verdict first (what
blocks the job, or how it ended), then for a waiting job every check in dispatch order with
whether it blocks. Esc goes back.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from taskq_cli.explain_verdict import job_state, verdict_label
from taskq_cli.tui.literal import LiteralStatic
from taskq_core.explain import Explanation


def render_explanation(explanation: Explanation) -> Text:
    """The job, the verdict, and (for a waiting job) every check in dispatch order."""
    job = explanation.job
    text = Text()
    text.append(f"job {job.id}", style="bold")
    text.append(f" (actor {job.actor!r}, queue {job.queue!r}) is {job_state(explanation)}\n")
    if explanation.origin is not None:
        text.append(explanation.origin + "\n")
    text.append("\n")
    text.append(f"{verdict_label(explanation)}: ", style="bold")
    text.append(explanation.verdict.message)
    if explanation.situation == "waiting":
        text.append("\n\nchecks, in dispatch order\n", style="dim")
        width = max(len(check.code) for check in explanation.checks)
        for check in explanation.checks:
            text.append("\n")
            if check.applies:
                text.append("BLOCKS ", style="bold red")
            else:
                text.append("ok     ", style="green")
            text.append(check.code.ljust(width) + "  ", style="bold")
            text.append(check.message)
    return text


class ExplainScreen(Screen[None]):
    """Why one job is not running (or how it ended)."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, explanation: Explanation) -> None:
        super().__init__()
        self.explanation = explanation

    def compose(self) -> ComposeResult:
        """One scrolling section."""
        with VerticalScroll(id="explain-body"):
            yield LiteralStatic(id="explain-text", classes="detail-section")
        yield Footer()

    def on_mount(self) -> None:
        """Render the answer."""
        self.sub_title = f"explain job {self.explanation.job.id}"
        section = self.query_one("#explain-text", LiteralStatic)
        section.border_title = f"Why: {verdict_label(self.explanation)}"
        section.update(render_explanation(self.explanation))
