"""Differential: random workflows under random operations on both backends, side by side.

Hypothesis draws a DAG of 2 to 12 steps (each requiring its dependencies' success or only
their end, some with a start an hour ahead) and a sequence of what a fleet does to it: dispatch
the due steps, end a running one (succeeded, failed for good, failed with a retry, cancelled
cooperatively; its hook run, or skipped as by a crash), let leases expire and reclaim them,
cancel a step as an operator, cancel or retry the workflow, and run the leader's sweep. After
every operation both backends must answer alike and show the same workflow (every step's
status, attempt, cancel reason and events, the workflow's status and counts), and what they
show must keep the release rule (``workflow_operations.WorkflowWalk.check``): a step leaves
``waiting`` only as ``decide_step`` decides from its dependencies' statuses, is due or running
only while the rule releases it, is released once per entry into ``waiting``, and the
workflow ends exactly when its steps all ended (at once, unless a release was skipped and no
sweep ran since).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from hypothesis.stateful import initialize, rule, run_state_machine_as_test

from taskq_core.backend.postgres.backend import PostgresBackend
from tests.conformance.conftest import Harness
from tests.conformance.differential_operations import Op, Step
from tests.conformance.side_by_side import SideBySide, answer_of, open_pair, run_settings
from tests.conformance.workflow_operations import (
    DAG,
    MAX_STEPS,
    OPERATION,
    Seen,
    StepSpec,
    WorkflowWalk,
    answer,
    seen,
)
from tests.conftest import PgTarget

pytestmark = pytest.mark.slow

# Operations of a sequence after the workflow's creation.
STEPS = 40
# CI's fixed sequences (``side_by_side.examples``).
EXAMPLES = 20


class WorkflowDifferential(SideBySide):
    """One drawn workflow on both backends; every drawn operation goes to each, then the
    answers and the workflow are compared and the rule checked."""

    def __init__(self, pg: PgTarget) -> None:
        super().__init__(pg)
        self.walk = WorkflowWalk(())

    async def open(self, pg: PgTarget) -> tuple[Harness, Harness]:
        """Dispatch windows wider than a workflow (``side_by_side.open_pair``); Postgres
        releases in parts of two steps (a fan-out's parts must decide what one would)."""
        memory, postgres = await open_pair(pg, MAX_STEPS)
        assert isinstance(postgres.backend, PostgresBackend)
        postgres.backend.release_chunk = 2
        return memory, postgres

    @initialize(dag=DAG)
    def create(self, dag: Sequence[StepSpec]) -> None:
        self.walk = WorkflowWalk(dag)
        self.history.append(f"create {list(dag)}")
        self.runner.run(self.both("create", self.walk.create))

    @rule(op=OPERATION)
    def operate(self, op: Op) -> None:
        self.runner.run(self.apply(op))

    async def apply(self, op: Op) -> None:
        before = await self.seen(self.memory)
        if op.kind == "end" and not self.walk.running(before):  # end what a dispatch hands out
            await self.apply(Op("dispatch"))
            before = await self.seen(self.memory)
        label, step = self.walk.step(op, before)
        self.history.append(label)
        if step is None:
            return
        after = await self.both(label, step)
        self.walk.check(op, label, before, after)

    async def both(self, label: str, step: Step) -> Seen:
        """Run ``step`` on memory, then Postgres; compare the answers, then the workflow."""
        answers = [
            await answer_of(harness, step, lambda value: answer(value, self.walk.names))
            for harness in (self.memory, self.postgres)
        ]
        trail = self.trail()
        assert answers[1] == answers[0], f"answers differ after:\n{trail}"
        memory, postgres = await self.seen(self.memory), await self.seen(self.postgres)
        assert postgres == memory, f"state differs after:\n{trail}\n" + _diff(memory, postgres)
        return memory

    async def seen(self, harness: Harness) -> Seen:
        return await seen(harness.backend, self.walk.workflow_id, self.walk.job_ids)


def _diff(memory: Seen, postgres: Seen) -> str:
    """The parts that differ, for the failure message."""
    differing: list[object] = []
    if memory.workflow != postgres.workflow:
        differing.append({"workflow": [memory.workflow, postgres.workflow]})
    pairs = zip(memory.steps, postgres.steps, memory.events, postgres.events, strict=True)
    for n, (m, p, m_events, p_events) in enumerate(pairs):
        if (m, m_events) != (p, p_events):
            differing.append({f"s{n}": {"memory": [m, m_events], "postgres": [p, p_events]}})
    return json.dumps(differing, default=str, indent=1)


# CI's fixed sequences pass in about 20 s; a hunt (TASKQ_DIFFERENTIAL_EXAMPLES) takes about
# 1.5 s a sequence.
@pytest.mark.timeout(600)
def test_random_workflows_release_by_the_rule_alike_on_both_backends(
    differential_schema: PgTarget,
) -> None:
    class OnTheTestSchema(WorkflowDifferential):
        def __init__(self) -> None:
            super().__init__(differential_schema)

    run_state_machine_as_test(OnTheTestSchema, settings=run_settings(EXAMPLES, STEPS))
