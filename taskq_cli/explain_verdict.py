"""The ``taskq jobs explain`` verdict in one word, as the command, ``taskq top`` and the web
UI all print it. Plain text: no rich, Textual or web stack here.
"""

from __future__ import annotations

from taskq_core.explain import Explanation

# The verdict's label by the job's situation, when the verdict's code does not decide it.
_SITUATION_LABELS = {"terminal": "finished", "archived": "archived", "running": "running"}


def verdict_label(explanation: Explanation) -> str:
    """One word for the verdict: blocked, runnable, stuck, running, finished, archived."""
    code = explanation.verdict.code
    if code == "runnable":
        return "runnable"
    if code == "worker_stale":
        return "stuck"
    return _SITUATION_LABELS.get(explanation.situation, "blocked")
