"""A workflow step that waits for its dependencies: what it waits for, in words and facts.

A step with dependencies is ``waiting`` (dispatch never reads it) until the release rule
(``protocol.workflows.decide_step``) lets it go; none of the dispatch checks applies before
that, so its one finding names the dependencies that have not ended, with their statuses.
When all of them ended and it still waits, the release that should have decided it was lost
(a worker died between its terminal write and its hook): the leader's sweep decides it.
``jobs show``, ``taskq top`` and the web UI word the dependencies with the same helpers.
"""

from __future__ import annotations

from collections.abc import Mapping

from taskq_core.backend.protocol import JobRow
from taskq_core.backend.protocol.workflows import (
    WORKFLOW_ID_KEY,
    WORKFLOW_STEP_KEY,
    Requires,
    Upstream,
    requires_of,
)
from taskq_core.explain.answer import Check
from taskq_core.statemachine import TERMINAL_STATUSES

CODE = "workflow_dependencies"


def not_ended(upstream: Mapping[str, Upstream]) -> dict[str, Upstream]:
    """The dependencies that have not ended yet, by step name (in name order)."""
    return {
        name: dep for name, dep in sorted(upstream.items()) if dep.status not in TERMINAL_STATUSES
    }


def dependency_list(upstream: Mapping[str, Upstream]) -> str:
    """``t1 (running), t2 (pending)``."""
    return ", ".join(f"{name} ({dep.status.value})" for name, dep in sorted(upstream.items()))


def release_terms(requires: Requires) -> str:
    """When a waiting step runs, in words."""
    if requires == "finished":
        return "it runs once every one ended, whatever the outcome"
    return "it runs once every one succeeded, and is cancelled if one fails for good"


def waiting_text(upstream: Mapping[str, Upstream], requires: Requires) -> str:
    """What a waiting step waits for: its dependencies not yet ended and on what terms, or
    why it still waits when every one ended."""
    pending = not_ended(upstream)
    if pending:
        return f"{dependency_list(pending)}; {release_terms(requires)}"
    if upstream:
        outcomes = ", ".join(f"{name} {dep.status.value}" for name, dep in sorted(upstream.items()))
        return (
            f"nothing: every dependency ended ({outcomes}); the release was lost and the "
            "leader's sweep decides the step at its next pass"
        )
    return (
        "nothing: its dependencies are gone from the jobs table; the leader's sweep decides "
        "the step at its next pass"
    )


def dependencies_check(job: JobRow, upstream: Mapping[str, Upstream]) -> Check:
    """The finding of a waiting step: it waits for its dependencies (always applies)."""
    requires = requires_of(job.metadata)
    facts = {
        "workflow_id": job.metadata.get(WORKFLOW_ID_KEY),
        "step": job.metadata.get(WORKFLOW_STEP_KEY),
        "requires": requires,
        "waiting_for": sorted(not_ended(upstream)),
        "dependencies": [
            {"step": name, "job_id": dep.job_id, "status": dep.status}
            for name, dep in sorted(upstream.items())
        ],
    }
    message = f"it is a workflow step that waits for {waiting_text(upstream, requires)}"
    return Check(CODE, True, message, facts)
