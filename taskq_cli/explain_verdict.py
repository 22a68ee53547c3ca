"""The ``taskq jobs explain`` verdict in one word, as the command, ``taskq top`` and the web
UI all print it. Plain text: no rich, Textual or web stack here.
"""

from __future__ import annotations

from taskq_core.explain import Explanation

# The verdict's label by the job's situation, when the verdict's code does not decide it.
_SITUATION_LABELS = {"terminal": "finished", "archived": "archived", "running": "running"}


def verdict_label(explanation: Explanation) -> str:
    """One word for the verdict: blocked, runnable, stuck, claimed, running, finished,
    archived (claimed: a worker holds the job, its body has not started)."""
    code = explanation.verdict.code
    if code == "runnable":
        return "runnable"
    if code == "worker_stale":
        return "stuck"
    if explanation.situation == "running" and explanation.job.is_claimed:
        return "claimed"
    return _SITUATION_LABELS.get(explanation.situation, "blocked")


def job_state(explanation: Explanation) -> str:
    """What the job is, for the headline: ``claimed by worker W, waiting for a free
    consumer`` for a claimed job, else its status (``succeeded (archived)``)."""
    job = explanation.job
    if explanation.situation == "running" and job.is_claimed:
        return f"claimed by worker {job.locked_by_worker}, waiting for a free consumer"
    archived = " (archived)" if explanation.situation == "archived" else ""
    return job.status.value + archived
