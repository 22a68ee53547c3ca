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

import asyncio
import json
import os
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.clock import FakeClock
from tests.conformance.conftest import Harness
from tests.conformance.differential_operations import Op
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
from tests.conftest import PgTarget, delete_every_row

pytestmark = pytest.mark.slow

# Operations of a sequence after the workflow's creation.
STEPS = 40
# TASKQ_DIFFERENTIAL_EXAMPLES=N draws N random sequences instead of CI's fixed ones.
_HUNT = os.environ.get("TASKQ_DIFFERENTIAL_EXAMPLES")
EXAMPLES = int(_HUNT) if _HUNT else 20


async def _pair(pg: PgTarget) -> tuple[Harness, Harness]:
    """A fresh memory backend and a Postgres one on the emptied schema."""
    await delete_every_row(pg)
    clock = FakeClock()
    # Dispatch windows wider than a workflow keep Postgres's bounded reads out of the
    # comparison (a call may claim fewer than its limit while more are due).
    postgres = await PostgresBackend.connect(pg.dsn, pg.schema, dispatch_oversample=MAX_STEPS)
    return Harness("memory", InMemoryBackend(clock=clock), clock=clock), Harness(
        "postgres", postgres, pg=pg
    )


class WorkflowDifferential(RuleBasedStateMachine):
    """One drawn workflow on both backends; every drawn operation goes to each, then the
    answers and the workflow are compared and the rule checked."""

    def __init__(self, pg: PgTarget) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        try:
            self.memory, self.postgres = self.runner.run(_pair(pg))
        except BaseException:
            self.runner.close()
            raise
        self.walk = WorkflowWalk(())
        self.history: list[str] = []

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

    async def both(self, label: str, step: object) -> Seen:
        """Run ``step`` on memory, then Postgres; compare the answers, then the workflow."""
        assert callable(step)
        answers = []
        for harness in (self.memory, self.postgres):
            try:
                answers.append(answer(await step(harness), self.walk.names))
            except ValueError as exc:  # the same refusal must come from both
                answers.append(("raised", type(exc).__name__))
            if harness.clock is not None:
                harness.clock.advance(0.001)  # every step happens after the one before it
        trail = "\n".join(f"{n}: {line}" for n, line in enumerate(self.history))
        assert answers[1] == answers[0], f"answers differ after:\n{trail}"
        memory, postgres = await self.seen(self.memory), await self.seen(self.postgres)
        assert postgres == memory, f"state differs after:\n{trail}\n" + _diff(memory, postgres)
        return memory

    async def seen(self, harness: Harness) -> Seen:
        return await seen(harness.backend, self.walk.workflow_id, self.walk.job_ids)

    def teardown(self) -> None:
        try:
            self.runner.run(self.postgres.backend.close())
            self.runner.run(self.memory.backend.close())
        finally:
            self.runner.close()


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

    run_state_machine_as_test(
        OnTheTestSchema,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=not _HUNT,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
        ),
    )
