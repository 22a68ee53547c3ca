"""A workflow step that waits for its dependencies: what it waits for, in words and facts.

A step with dependencies is ``waiting`` (dispatch never reads it) until the release rule
(``protocol.workflows.decide_step``) lets it go; none of the dispatch checks applies before
that, so its one finding names the dependencies that have not ended, with their statuses.
When the rule would already release or cancel it and it still waits, the release that should
have decided it was lost (a worker died between its terminal write and its hook): the
leader's sweep decides it. ``jobs show``, ``taskq top`` and the web UI word a step's
dependencies with the same helpers, from one read without results
(``list_step_dependencies``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taskq_core.backend.protocol import JobRow
from taskq_core.backend.protocol.workflows import (
    WORKFLOW_ID_KEY,
    WORKFLOW_STEP_KEY,
    Decision,
    Requires,
    StepDependency,
    decide_step,
    requires_of,
)
from taskq_core.explain.answer import Check
from taskq_core.statemachine import TERMINAL_STATUSES

CODE = "workflow_dependencies"


def not_ended(dependencies: Sequence[StepDependency]) -> list[StepDependency]:
    """The dependencies that have not ended yet (in the order given: name order)."""
    return [dep for dep in dependencies if dep.status not in TERMINAL_STATUSES]


def release_decision(dependencies: Sequence[StepDependency], requires: Requires) -> Decision:
    """What a release would do with the waiting step now (``decide_step``)."""
    return decide_step(requires, (dep.status for dep in dependencies))


def dependency_document(dep: StepDependency) -> dict[str, Any]:
    """One dependency for JSON (explain's facts, ``jobs show --json``, the web UI's API)."""
    return {"step": dep.name, "job_id": dep.job_id, "status": dep.status}


def dependency_list(dependencies: Sequence[StepDependency]) -> str:
    """``t1 (running), t2 (pending)``."""
    return ", ".join(f"{dep.name} ({dep.status.value})" for dep in dependencies)


def release_terms(requires: Requires) -> str:
    """When a waiting step runs, in words (after a list of its dependencies)."""
    if requires == "finished":
        return "it runs once every one ended, whatever the outcome"
    return "it runs once every one succeeded, and is cancelled if one fails for good"


def waiting_for_text(dependencies: Sequence[StepDependency], requires: Requires) -> str:
    """What a waiting step waits for: its dependencies not yet ended, or why it still waits
    when the release rule would already decide it."""
    decision = release_decision(dependencies, requires)
    if decision == "wait":
        return dependency_list(not_ended(dependencies))
    if not dependencies:
        return (
            "nothing: its dependencies are gone from the jobs table; the leader's sweep "
            "decides the step at its next pass"
        )
    outcomes = ", ".join(f"{dep.name} {dep.status.value}" for dep in dependencies)
    cause = "every dependency ended" if decision == "release" else "a dependency did not succeed"
    return (
        f"nothing: {cause} ({outcomes}); the release was lost and the leader's sweep decides "
        "the step at its next pass"
    )


def waiting_text(dependencies: Sequence[StepDependency], requires: Requires) -> str:
    """``waiting_for_text``, with the step's terms while its dependencies hold it."""
    text = waiting_for_text(dependencies, requires)
    if release_decision(dependencies, requires) != "wait":
        return text
    return f"{text}; {release_terms(requires)}"


def dependencies_check(job: JobRow, dependencies: Sequence[StepDependency]) -> Check:
    """The finding of a waiting step: it waits for its dependencies (always applies)."""
    requires = requires_of(job.metadata)
    facts = {
        "workflow_id": job.metadata.get(WORKFLOW_ID_KEY),
        "step": job.metadata.get(WORKFLOW_STEP_KEY),
        "requires": requires,
        "waiting_for": [dep.name for dep in not_ended(dependencies)],
        "dependencies": [dependency_document(dep) for dep in dependencies],
    }
    message = f"it is a workflow step that waits for {waiting_text(dependencies, requires)}"
    return Check(CODE, True, message, facts)
