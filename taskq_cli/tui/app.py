"""TopApp: the ``taskq top`` dashboard, built on a DashboardSource.

How a refresh works: a timer (every ``refresh`` seconds) starts a Textual worker that asks
the source for a Snapshot under ``asyncio.wait_for(timeout)``; the worker posts
SnapshotLoaded or RefreshFailed, and the handlers update the panes on the UI side. A tick
that finds the previous refresh still running skips (a slow database is never hit by a pile
of overlapping reads); a new jobs filter replaces the running refresh at once. When a
refresh fails the panes keep the last snapshot and the banner says so; the next success
clears it.

Actions (cancel or retry the selected job, pause or resume a queue) always go through a
ConfirmScreen (a pause through a ReasonScreen, which records why with who and when), then
run in a worker, notify their outcome and trigger a refresh. ``p`` acts on the queue of what
is selected in the focused pane: the queue row in the queues pane, the job's queue in the
jobs pane; resuming shows who paused it and why. ``e`` opens the ``jobs explain`` answer of
the selected job, ``y`` copies its whole id. Ctrl-C quits like ``q`` (or copies the text
selected with the mouse, when there is some).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from uuid import UUID

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.filter import LineFilter
from textual.notifications import SeverityLevel
from textual.widgets import DataTable, Footer
from textual.worker import Worker

from taskq_cli.dashboard.failures import describe_failure
from taskq_cli.dashboard.filters import JobsFilter
from taskq_cli.dashboard.queue_blockers import pause_text
from taskq_cli.dashboard.snapshot import Snapshot
from taskq_cli.dashboard.source import DashboardSource
from taskq_cli.tui.formatting import Palette, short_id
from taskq_cli.tui.literal import TerminalControlFilter
from taskq_cli.tui.messages import (
    JobAction,
    JobActionRequested,
    JobChosen,
    JobsFilterChanged,
    RefreshFailed,
    SnapshotLoaded,
)
from taskq_cli.tui.widgets.banner import ConnectionBanner
from taskq_cli.tui.widgets.batches_table import BatchesTable, batches_title
from taskq_cli.tui.widgets.confirm import ConfirmScreen, ReasonScreen
from taskq_cli.tui.widgets.explain import ExplainScreen
from taskq_cli.tui.widgets.job_detail import JobDetailScreen
from taskq_cli.tui.widgets.jobs_pane import JobsPane
from taskq_cli.tui.widgets.limits_table import LimitsTable, limits_title
from taskq_cli.tui.widgets.optional_pane import OptionalPane
from taskq_cli.tui.widgets.queues_table import QueuesTable
from taskq_cli.tui.widgets.summary import SummaryHeader
from taskq_cli.tui.widgets.workers_table import WorkersTable, workers_title
from taskq_cli.tui.widgets.workflows_table import WorkflowsTable, workflows_title
from taskq_core.backend.protocol import CancelOutcome, JobSummary
from taskq_core.errors import JobNotFoundError
from taskq_core.statemachine import RETRYABLE_STATUSES
from taskq_core.terminal_text import terminal_safe

_CANCEL_OUTCOMES: dict[CancelOutcome, str] = {
    "cancelled": "cancelled",
    "requested": "cancel requested; its worker stops it at the next check",
    "already_requested": "a cancel was already requested",
    "terminal": "already finished, nothing to cancel",
    "not_found": "no such job any more",
}
# Actions that only make sense on the main screen (the detail screen has its own c, r, e, y).
_MAIN_SCREEN_ACTIONS = frozenset(
    {"filter", "cancel_job", "retry_job", "toggle_pause", "explain_job", "copy_id", "stopped"}
)
# ...of which these also work on the detail screen, on its job.
_DETAIL_SCREEN_ACTIONS = frozenset({"explain_job", "copy_id"})


class TopApp(App[None]):
    """The live dashboard. ``refresh``: seconds between refreshes; ``timeout``: how long one
    read may take before it counts as failed."""

    CSS_PATH = "top.tcss"
    TITLE = "taskq top"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        # Priority: before the screen's copy binding and any focused widget's.
        Binding("ctrl+c", "quit_or_copy", "Quit", show=False, priority=True),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("e", "explain_job", "Explain"),
        Binding("c", "cancel_job", "Cancel"),
        Binding("r", "retry_job", "Retry"),
        Binding("y", "copy_id", "Copy id"),
        Binding("p", "toggle_pause", "Pause/resume"),
        Binding("w", "stopped", "Stopped"),
        Binding("ctrl+r", "refresh_now", "Refresh"),
    ]

    def __init__(
        self, source: DashboardSource, *, refresh: float = 1.0, timeout: float = 5.0
    ) -> None:
        if refresh <= 0 or timeout <= 0:
            raise ValueError("refresh and timeout must be positive")
        super().__init__()
        self.source = source
        self.refresh_interval = refresh
        self.query_timeout = timeout
        self.jobs_filter = JobsFilter()
        self.snapshot: Snapshot | None = None
        self.failing = False
        self._refresh_worker: Worker[None] | None = None
        self.summary = SummaryHeader(source.database, source.schema, id="summary")
        self.banner = ConnectionBanner(id="banner")
        self.queues_table = QueuesTable(id="queues-table")
        self.workers_table = WorkersTable(source, timeout, id="workers-table")
        self.limits_table = LimitsTable(id="limits-table")
        self.limits_pane = OptionalPane(self.limits_table, "Limits", limits_title)
        self.batches_table = BatchesTable(id="batches-table")
        self.batches_pane = OptionalPane(self.batches_table, "Batches", batches_title)
        self.workflows_table = WorkflowsTable(id="workflows-table")
        self.workflows_pane = OptionalPane(self.workflows_table, "Workflows", workflows_title)
        self.jobs_pane = JobsPane(id="jobs-pane")
        self._control_filter = TerminalControlFilter()

    def compose(self) -> ComposeResult:
        """Summary, banner, then the panes (limits only when some are declared, batches only
        while some are active, workflows while some run or ended lately) and the key
        footer."""
        yield self.summary
        yield self.banner
        with Vertical(id="queues-pane", classes="pane") as queues:
            queues.border_title = "Queues"
            yield self.queues_table
        with Vertical(id="workers-pane", classes="pane") as workers:
            workers.border_title = "Workers"
            self.workers_pane = workers
            yield self.workers_table
        # Each shown only while it has rows (see top.tcss).
        yield self.limits_pane
        yield self.batches_pane
        yield self.workflows_pane
        yield self.jobs_pane
        yield Footer()

    def on_mount(self) -> None:
        """Start refreshing: once now, then every ``refresh`` seconds."""
        self.jobs_pane.add_class("pane")
        self.jobs_pane.table.focus()
        self.set_interval(self.refresh_interval, self.action_refresh_now)
        self.action_refresh_now()

    def get_line_filters(self) -> Sequence[LineFilter]:
        """Textual's filters, then the one that drops control characters from every line."""
        return [*super().get_line_filters(), self._control_filter]

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every toast (from any screen or widget): control characters shown escaped."""
        super().notify(
            terminal_safe(message),
            title=terminal_safe(title),
            severity=severity,
            timeout=timeout,
            markup=markup,
        )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Main-screen actions are off while a detail screen or dialog is on top (explain
        and copy stay on for the detail screen's job)."""
        if len(self.screen_stack) == 1 or action not in _MAIN_SCREEN_ACTIONS:
            return True
        return action in _DETAIL_SCREEN_ACTIONS and isinstance(self.screen, JobDetailScreen)

    # --- refreshing ---------------------------------------------------------------------
    def action_refresh_now(self) -> None:
        """Refresh unless a refresh is already running."""
        if self._refresh_worker is not None and self._refresh_worker.is_running:
            return
        self._start_refresh()

    def _start_refresh(self) -> None:
        # exclusive: a refresh for a new filter replaces the one still running.
        self._refresh_worker = self.run_worker(
            self._load_snapshot(self.jobs_filter),
            name="refresh",
            group="refresh",
            exclusive=True,
            exit_on_error=False,
        )

    async def _load_snapshot(self, jobs_filter: JobsFilter) -> None:
        try:
            snapshot = await asyncio.wait_for(
                self.source.snapshot(jobs_filter), timeout=self.query_timeout
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            unreachable, reason = describe_failure(exc, self.query_timeout)
            self.post_message(RefreshFailed(reason, unreachable))
            return
        self.post_message(SnapshotLoaded(snapshot))

    @on(SnapshotLoaded)
    def _show_snapshot(self, message: SnapshotLoaded) -> None:
        snapshot = message.snapshot
        if snapshot.jobs_filter != self.jobs_filter:
            return  # read for a filter the operator has replaced since
        self.snapshot = snapshot
        palette = Palette.from_variables(self.theme_variables)
        try:
            self.summary.show(snapshot, palette)
            self.queues_table.show(snapshot, palette)
            self.workers_table.show(snapshot, palette)
            self.workers_pane.border_title = workers_title(
                snapshot, self.workers_table.show_stopped
            )
            for pane in (self.limits_pane, self.batches_pane, self.workflows_pane):
                pane.show(snapshot, palette)
            self.jobs_pane.show(snapshot, palette)
        except NoMatches:
            return  # a refresh that lands while the app quits: its widgets are gone
        if self.failing:
            self.failing = False
            self.banner.clear()
            self.notify("the database answers again", title="taskq top")

    @on(RefreshFailed)
    def _show_failure(self, message: RefreshFailed) -> None:
        last_good = None if self.snapshot is None else self.snapshot.now
        try:
            self.banner.show_failure(message.reason, message.unreachable, last_good)
        except NoMatches:
            return  # the app is quitting
        if not self.failing:
            self.failing = True
            head = "database unreachable" if message.unreachable else "refresh failed"
            self.notify(
                f"{head}: {message.reason}", title="taskq top", severity="error", markup=False
            )

    # --- the jobs pane --------------------------------------------------------------------
    def action_filter(self) -> None:
        """Open the jobs filter line."""
        self.jobs_pane.open_filter()

    @on(JobsFilterChanged)
    def _change_filter(self, message: JobsFilterChanged) -> None:
        self.jobs_filter = message.jobs_filter
        self._start_refresh()

    @on(DataTable.RowSelected, "#queues-table")
    def _show_queue_jobs(self, event: DataTable.RowSelected) -> None:
        """Enter on a queue: the jobs pane lists that queue's jobs (same statuses)."""
        event.stop()
        queue = event.row_key.value
        if queue is not None:
            self.jobs_pane.apply_filter(replace(self.jobs_filter, queue=queue))
            self.jobs_pane.table.focus()

    @on(JobChosen)
    def _choose_job(self, message: JobChosen) -> None:
        self.run_worker(
            self._open_detail(message.job_id), group="detail", exclusive=True, exit_on_error=False
        )

    async def _open_detail(self, job_id: UUID) -> None:
        try:
            detail = await asyncio.wait_for(self.source.job_detail(job_id), self.query_timeout)
        except Exception as exc:
            self._notify_failure(f"cannot load job {short_id(job_id)}", exc)
            return
        if detail is None:
            self.notify(f"job {job_id} no longer exists", severity="warning")
            return
        await self.push_screen(JobDetailScreen(detail))

    async def _reload_detail(self, job_id: UUID) -> None:
        screen = self.screen
        if not isinstance(screen, JobDetailScreen) or screen.job_id != job_id:
            return
        try:
            detail = await asyncio.wait_for(self.source.job_detail(job_id), self.query_timeout)
        except Exception as exc:
            self._notify_failure(f"cannot reload job {short_id(job_id)}", exc)
            return
        if detail is not None:
            screen.show(detail)

    # --- actions --------------------------------------------------------------------------
    def action_cancel_job(self) -> None:
        """Cancel the job under the jobs pane's cursor (after confirmation)."""
        self._ask_job_action("cancel")

    def action_retry_job(self) -> None:
        """Retry the job under the jobs pane's cursor (after confirmation)."""
        self._ask_job_action("retry")

    def _ask_job_action(self, action: JobAction) -> None:
        job = self.jobs_pane.table.selected
        if job is None:
            self.notify("no job selected", severity="warning")
            return
        self._confirm_job_action(job.id, action)

    @on(JobActionRequested)
    def _job_action_requested(self, message: JobActionRequested) -> None:
        self._confirm_job_action(message.job_id, message.action)

    def _known_job(self, job_id: UUID) -> JobSummary | None:
        screen = self.screen
        if isinstance(screen, JobDetailScreen) and screen.job_id == job_id:
            return screen.detail.job
        return self.jobs_pane.table.jobs.get(str(job_id))

    def _confirm_job_action(self, job_id: UUID, action: JobAction) -> None:
        job = self._known_job(job_id)
        label = short_id(job_id)
        if job is not None:
            label = f"{label} ({job.actor} on {job.queue}, {job.status.value})"
            if action == "cancel" and job.is_terminal:
                self.notify(f"job {short_id(job_id)} already finished: nothing to cancel")
                return
            if action == "retry" and job.status not in RETRYABLE_STATUSES:
                self.notify(
                    f"job {short_id(job_id)} is {job.status.value}: only failed, crashed or "
                    "cancelled jobs can be retried",
                    severity="warning",
                )
                return
        if action == "cancel":
            question = f"Cancel job {label}?"
            detail = "A waiting job is cancelled at once; a running one is asked to stop."
        else:
            question = f"Retry job {label}?"
            detail = "It goes back to pending with a fresh attempt budget."
        self.push_screen(
            ConfirmScreen(question, detail), callback=partial(self._job_confirmed, job_id, action)
        )

    def _job_confirmed(self, job_id: UUID, action: JobAction, confirmed: bool | None) -> None:
        if confirmed:
            self.run_worker(self._run_job_action(job_id, action), group="action")

    async def _run_job_action(self, job_id: UUID, action: JobAction) -> None:
        try:
            if action == "cancel":
                outcome = await asyncio.wait_for(self.source.cancel_job(job_id), self.query_timeout)
                said = _CANCEL_OUTCOMES[outcome]
            else:
                retried = await asyncio.wait_for(self.source.retry_job(job_id), self.query_timeout)
                said = "back to pending" if retried else "not retried (it is not failed any more)"
        except Exception as exc:
            self._notify_failure(f"{action} of job {short_id(job_id)} failed", exc)
            return
        self.notify(f"job {short_id(job_id)}: {said}", title=action, markup=False)
        await self._reload_detail(job_id)
        self._start_refresh()

    def action_toggle_pause(self) -> None:
        """Pause or resume the queue of the focused pane's selection (after confirmation):
        the queue row in the queues pane, the selected job's queue in the jobs pane."""
        focused = self.focused
        if focused is self.queues_table:
            queue = self.queues_table.selected
            if queue is None:
                self.notify("no queue selected", severity="warning")
                return
            name, paused, whose = queue.name, queue.paused, ""
        elif focused is self.jobs_pane.table:
            job = self.jobs_pane.table.selected
            if job is None:
                self.notify("no job selected", severity="warning")
                return
            known = self.queues_table.queues.get(job.queue)
            name, paused = job.queue, known is not None and known.paused
            whose = f" (the queue of job {short_id(job.id)})"
        else:
            self.notify("select a queue or a job first", severity="warning")
            return
        if not paused:
            self.push_screen(
                ReasonScreen(
                    f"Pause queue {name!r}{whose}?",
                    "Workers stop claiming its jobs; jobs already running finish. Why "
                    "(recorded with your user@host; Enter to pause, Esc to back out):",
                    placeholder="reason (optional)",
                ),
                callback=partial(self._pause_confirmed, name),
            )
            return
        note = ""
        if self.snapshot is not None:
            pause = self.snapshot.pauses.get(name)
            said = pause_text(pause, self.snapshot.now)
            note = said[:1].upper() + said[1:] + ". "  # (capitalize() lowercases the reason)
        self.push_screen(
            ConfirmScreen(
                f"Resume queue {name!r}{whose}?", f"{note}Workers start claiming its jobs again."
            ),
            callback=partial(self._resume_confirmed, name),
        )

    def _pause_confirmed(self, queue: str, reason: str | None) -> None:
        if reason is not None:
            self.run_worker(self._set_paused(queue, True, reason or None), group="action")

    def _resume_confirmed(self, queue: str, confirmed: bool | None) -> None:
        if confirmed:
            self.run_worker(self._set_paused(queue, False), group="action")

    async def _set_paused(self, queue: str, pause: bool, reason: str | None = None) -> None:
        try:
            await asyncio.wait_for(
                self.source.set_queue_paused(queue, pause, reason), self.query_timeout
            )
        except Exception as exc:
            self._notify_failure(f"cannot {'pause' if pause else 'resume'} {queue!r}", exc)
            return
        self.notify(f"queue {queue!r} {'paused' if pause else 'resumed'}", markup=False)
        self._start_refresh()

    # --- explain, copy, workers, quitting --------------------------------------------------
    def _job_in_view(self) -> UUID | None:
        """The job on the detail screen, else the one under the jobs pane's cursor."""
        screen = self.screen
        if isinstance(screen, JobDetailScreen):
            return screen.job_id
        job = self.jobs_pane.table.selected
        return None if job is None else job.id

    def action_explain_job(self) -> None:
        """Open the ``jobs explain`` answer of the selected job."""
        job_id = self._job_in_view()
        if job_id is None:
            self.notify("no job selected", severity="warning")
            return
        self.run_worker(self._explain(job_id), group="detail", exclusive=True, exit_on_error=False)

    async def _explain(self, job_id: UUID) -> None:
        try:
            explanation = await asyncio.wait_for(self.source.explain(job_id), self.query_timeout)
        except JobNotFoundError:
            self.notify(f"job {job_id} no longer exists", severity="warning", markup=False)
            return
        except Exception as exc:
            self._notify_failure(f"cannot explain job {short_id(job_id)}", exc)
            return
        await self.push_screen(ExplainScreen(explanation))

    def action_copy_id(self) -> None:
        """Copy the selected job's whole id to the clipboard (and show it)."""
        job_id = self._job_in_view()
        if job_id is None:
            self.notify("no job selected", severity="warning")
            return
        self.copy_to_clipboard(str(job_id))
        self.notify(str(job_id), title="copied job id", markup=False)

    def action_stopped(self) -> None:
        """Show or hide the stopped workers."""
        self.workers_table.show_stopped = not self.workers_table.show_stopped
        if self.snapshot is not None:
            palette = Palette.from_variables(self.theme_variables)
            self.workers_table.show(self.snapshot, palette)
            self.workers_pane.border_title = workers_title(
                self.snapshot, self.workers_table.show_stopped
            )

    def action_quit_or_copy(self) -> None:
        """Ctrl-C: copy the text selected with the mouse if there is some, else quit."""
        selected = self.screen.get_selected_text()
        if selected:
            self.copy_to_clipboard(selected)
            self.screen.clear_selection()
            self.notify("copied the selected text", markup=False)
            return
        self.exit()

    def _notify_failure(self, what: str, error: BaseException) -> None:
        _, reason = describe_failure(error, self.query_timeout)
        self.notify(f"{what}: {reason}", severity="error", markup=False)
