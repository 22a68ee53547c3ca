"""The frame both differential tests run in: a memory backend and a Postgres one side by side
on a loop of their own, one call's answer made comparable, and the run's settings."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine

from taskq_core.backend.memory import InMemoryBackend
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.clock import FakeClock
from tests.conformance.conftest import Harness
from tests.conftest import PgTarget
from tests.schema_pool import delete_every_row

# TASKQ_DIFFERENTIAL_EXAMPLES=N draws N random sequences instead of CI's fixed ones (a
# longer hunt; pytest's --hypothesis-seed replays one).
HUNT = os.environ.get("TASKQ_DIFFERENTIAL_EXAMPLES")


def examples(fixed: int) -> int:
    """How many sequences a run draws: ``fixed`` in CI, the hunt's number when one is asked."""
    return int(HUNT) if HUNT else fixed


def run_settings(fixed_examples: int, steps: int) -> settings:
    """Derandomized (CI runs the same sequences every time) unless hunting; no database."""
    return settings(
        max_examples=examples(fixed_examples),
        stateful_step_count=steps,
        deadline=None,
        derandomize=not HUNT,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
        # No explain phase: it reruns the failing case under a tracer for minutes.
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    )


async def open_pair(pg: PgTarget, oversample: int) -> tuple[Harness, Harness]:
    """A fresh memory backend and a Postgres one on the emptied schema.

    Postgres reads bounded windows of candidates (a call may claim fewer than its limit while
    more are due); windows of ``oversample`` (the most jobs a walk makes) keep that out of
    the comparison.
    """
    await delete_every_row(pg.dsn, pg.schema)
    clock = FakeClock()
    postgres = await PostgresBackend.connect(pg.dsn, pg.schema, dispatch_oversample=oversample)
    memory = Harness("memory", InMemoryBackend(clock=clock), clock=clock)
    return memory, Harness("postgres", postgres, pg=pg)


async def answer_of(
    harness: Harness,
    step: Callable[[Harness], Awaitable[object]],
    comparable: Callable[[object], object],
) -> object:
    """Run ``step`` on one backend; its answer made ``comparable`` across backends."""
    try:
        answer = comparable(await step(harness))
    except ValueError as exc:  # the same refusal must come from both
        answer = ("raised", type(exc).__name__)
    if harness.clock is not None:
        harness.clock.advance(0.001)  # every step happens after the one before it
    return answer


class SideBySide(RuleBasedStateMachine):
    """Both backends side by side, opened by ``open``; the labels of the operations run so
    far, for a failure's message. Runs its coroutines on a loop of its own."""

    def __init__(self, pg: PgTarget) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        try:
            self.memory, self.postgres = self.runner.run(self.open(pg))
        except BaseException:
            self.runner.close()
            raise
        self.history: list[str] = []

    async def open(self, pg: PgTarget) -> tuple[Harness, Harness]:
        """The memory and the Postgres harness, ready for the walk."""
        raise NotImplementedError

    def trail(self) -> str:
        """The operations so far, numbered."""
        return "\n".join(f"{n}: {line}" for n, line in enumerate(self.history))

    def teardown(self) -> None:
        """Close both backends and the loop."""
        try:
            self.runner.run(self.postgres.backend.close())
            self.runner.run(self.memory.backend.close())
        finally:
            self.runner.close()
