"""Workflows cost the hot path nothing and their own statements stay index-backed.

A step with dependencies waits in the ``waiting`` status, which no dispatch index holds (they
all read ``status = 'pending'``). Pinned here on the generic plans the worker pool uses: the
dispatch statements read the same rows and pages whether 20,000 waiting steps sit in their
queues or not, through indexes no waiting row is in; and the release, the workflow's end and
the leader's sweep find their rows through indexes on a table of 200,000 plain jobs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from taskq_core import Workflow
from taskq_core.backend.postgres.backend import PostgresBackend
from taskq_core.backend.postgres.queries import render
from taskq_core.backend.protocol import ActorDeclaration, EnqueueArgs
from taskq_core.client import JobsClient
from tests.conftest import PgTarget
from tests.postgres.test_retention_postgres import generic_plan, scan_names

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.fresh_schema]

WAITING = 20_000
HISTORY = 20_000
PLAIN_JOBS = 200_000


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


@dataclass(frozen=True)
class Reads:
    """What one dispatch read of jobs: each index it walked with the conditions it walked it
    by, rows and pages."""

    walks: frozenset[tuple[str, str]]
    rows: int
    pages: int

    @property
    def indexes(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.walks)


async def _dispatch_reads(
    conn: asyncpg.Connection, schema: str, statement: str, queues: list[str]
) -> Reads:
    """One real run of ``statement`` (generic plan, rolled back) on a vacuumed table."""
    await conn.execute(f"VACUUM ANALYZE {schema}.jobs")
    await conn.execute("SET plan_cache_mode = force_generic_plan; SET jit = off")
    await conn.execute(
        f"PREPARE dispatch(text[], int, uuid, interval, int) AS {render(statement, schema)}"
    )
    literal = "ARRAY[" + ", ".join(f"'{q}'" for q in queues) + "]"  # test-owned names
    rolled_back = conn.transaction()
    await rolled_back.start()
    try:
        raw = await conn.fetchval(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
            f"EXECUTE dispatch({literal}, 64, gen_random_uuid(), '60s', 2)"
        )
    finally:
        await rolled_back.rollback()
        await conn.execute("DEALLOCATE dispatch")
    walked = [
        node
        for node in _nodes(json.loads(raw)[0]["Plan"])
        if "Scan" in node["Node Type"]
        and node.get("Relation Name") == "jobs"
        and node.get("Actual Loops", 0) > 0
    ]
    return Reads(
        walks=frozenset(
            (node.get("Index Name", "(table)"), node.get("Index Cond", "")) for node in walked
        ),
        rows=sum(node["Actual Rows"] * node["Actual Loops"] for node in walked),
        pages=sum(node["Shared Hit Blocks"] + node["Shared Read Blocks"] for node in walked),
    )


async def _predicates(conn: asyncpg.Connection, schema: str) -> dict[str, str]:
    """Each index of jobs and its predicate ('' when it holds every row)."""
    records = await conn.fetch(
        """SELECT c.relname, coalesce(pg_get_expr(i.indpred, i.indrelid), '') AS predicate
           FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
           WHERE i.indrelid = $1::regclass""",
        f"{schema}.jobs",
    )
    return {r["relname"]: r["predicate"] for r in records}


def _meets_no_waiting_row(name: str, predicate: str, condition: str) -> bool:
    """Whether walking index ``name`` (partial by ``predicate``) by ``condition`` cannot meet
    a waiting step: an index of pending or running jobs, or walked for those only; the
    primary key, probed for the candidates' ids; the last-claim index, probed once per
    round_robin cohort for its newest entry."""
    return name in ("jobs_pkey", "jobs_cohort_claimed_idx") or any(
        f"status = '{status}'" in text
        for status in ("pending", "running")
        for text in (predicate, condition)
    )


@pytest.mark.parametrize(
    ("statement", "configured"),
    [("dispatch_plain", False), ("dispatch_batch", True)],
    ids=["plain", "caps-and-round-robin"],
)
async def test_dispatch_reads_nothing_of_20000_waiting_steps(
    pg: PgTarget, statement: str, configured: bool
) -> None:
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    conn = await asyncpg.connect(pg.dsn)
    try:
        if configured:  # a capped actor's window, round_robin cohorts
            await backend.update_queue("rr", mode="round_robin")
            await backend.sync_actor_configs(
                [ActorDeclaration("capped", "default", {}, 2, None, None)], force=False
            )
        # A table with history (so the plan is the one a real table gets), then the due jobs.
        await backend.enqueue_batch_fast(
            [EnqueueArgs("noop", {}, queue="rr" if n % 3 else "default") for n in range(HISTORY)]
        )
        await conn.execute(f"UPDATE {pg.schema}.jobs SET status = 'succeeded', finished_at = now()")
        await backend.enqueue_batch_fast(
            [EnqueueArgs("capped" if n % 2 else "noop", {"n": n}) for n in range(500)]
            + [
                EnqueueArgs("noop", {"n": n}, queue="rr", fairness_key=f"t{n % 10}")
                for n in range(200)
            ]
        )
        # 20,000 steps waiting on a root, in the same queues, cohorts and actors, at a higher
        # priority than every due job: any index that held them would put them first.
        workflow = Workflow("backlog")
        root = workflow.add("noop", {}, name="root", queue="elsewhere")
        for n in range(WAITING):
            queue = "rr" if n % 3 == 0 else "default"
            workflow.add(
                "capped" if n % 2 else "noop", {}, name=f"s{n}", after=[root], priority=10,
                queue=queue, fairness_key=f"w{n % 10}" if queue == "rr" else None,
            )  # fmt: skip
        async with JobsClient(backend=backend) as client:
            run = await client.enqueue_workflow(workflow)
        waiting = await conn.fetchval(
            f"SELECT count(*) FROM {pg.schema}.jobs WHERE status = 'waiting'"
        )
        assert waiting == WAITING

        queues = ["default", "rr"]
        with_backlog = await _dispatch_reads(conn, pg.schema, statement, queues)
        await conn.execute(
            f"DELETE FROM {pg.schema}.jobs WHERE metadata->>'workflow_id' = $1",
            str(run.id),
        )
        without = await _dispatch_reads(conn, pg.schema, statement, queues)

        predicates = await _predicates(conn, pg.schema)
        for name, condition in with_backlog.walks:
            assert _meets_no_waiting_row(name, predicates.get(name, ""), condition), name
        # Which index serves the running counts may differ with the statistics (each walk
        # is checked above to meet no waiting row); what is read must not grow.
        assert with_backlog.rows == without.rows
        # Walking 20,000 waiting entries would read well over 100 pages; allow a few for
        # hint bits and the free space the deleted rows left.
        assert with_backlog.pages <= without.pages + 32, (with_backlog, without)
    finally:
        await conn.close()
        await backend.close()


# --- the workflow statements on a big table ----------------------------------------------------
FAN_OUT = 1_000
FINISHED_WORKFLOWS = 20
FINISHED_STEPS = 1_000  # per finished workflow
OLDER_WORKFLOWS = 20_000  # finished, their steps pruned
OTHER_WAITING = 20_000  # steps of other running workflows, waiting


async def _fan_out(backend: PostgresBackend) -> tuple[UUID, UUID, list[UUID]]:
    """A workflow root -> FAN_OUT steps -> join; its id, the root's and the steps' job ids."""
    workflow = Workflow("fan-out")
    root = workflow.add("noop", {}, name="root")
    steps = [workflow.add("noop", {"n": n}, name=f"s{n}", after=[root]) for n in range(FAN_OUT)]
    workflow.add("noop", {}, name="join", after=steps)
    async with JobsClient(backend=backend) as client:
        run = await client.enqueue_workflow(workflow)
    return run.id, run.jobs["root"], [run.jobs[step.name] for step in steps]


async def _seed_history(conn: asyncpg.Connection, schema: str) -> None:
    """200k plain jobs of every status (a quarter of them batch children, whose metadata is
    not empty), finished workflows whose steps and edges are still kept, many more whose
    steps were pruned, and running workflows whose steps wait."""
    await conn.execute(
        f"""INSERT INTO {schema}.jobs (id, actor, queue, status, metadata)
            SELECT gen_random_uuid(), 'work', 'q' || (n % 8),
                   (ARRAY['pending', 'succeeded', 'failed', 'running', 'scheduled'])
                       [1 + n % 5]::{schema}.job_status,
                   CASE WHEN n % 4 = 0 THEN jsonb_build_object('batch_id', gen_random_uuid())
                        ELSE '{{}}'::jsonb END
            FROM generate_series(1, {PLAIN_JOBS}) AS n"""
    )
    await conn.execute(
        f"""WITH w AS (
                INSERT INTO {schema}.workflows (id, name, status, finished_at)
                SELECT gen_random_uuid(), 'done', 'succeeded', now()
                FROM generate_series(1, {FINISHED_WORKFLOWS})
                RETURNING id
            ),
            steps AS (
                INSERT INTO {schema}.jobs (id, actor, queue, status, finished_at, metadata)
                SELECT gen_random_uuid(), 'work', 'default', 'succeeded', now(),
                       jsonb_build_object('workflow_id', w.id::text, 'workflow_step', 's' || n)
                FROM w CROSS JOIN generate_series(1, {FINISHED_STEPS}) AS n
                RETURNING id, metadata
            )
            INSERT INTO {schema}.workflow_edges (workflow_id, parent_id, child_id)
            SELECT (s.metadata->>'workflow_id')::uuid, gen_random_uuid(), s.id FROM steps s"""
    )
    await conn.execute(
        f"""INSERT INTO {schema}.workflows (id, name, status, created_at, finished_at)
            SELECT gen_random_uuid(), 'older', 'succeeded', now() - make_interval(secs => n),
                   now() - make_interval(secs => n)
            FROM generate_series(1, {OLDER_WORKFLOWS}) AS n"""
    )
    await conn.execute(
        f"""WITH w AS (
                INSERT INTO {schema}.workflows (id, name)
                SELECT gen_random_uuid(), 'running' FROM generate_series(1, 20)
                RETURNING id
            ),
            steps AS (
                INSERT INTO {schema}.jobs (id, actor, queue, status, metadata)
                SELECT gen_random_uuid(), 'work', 'default', 'waiting',
                       jsonb_build_object('workflow_id', w.id::text, 'workflow_step', 's' || n)
                FROM w CROSS JOIN generate_series(1, {OTHER_WAITING // 20}) AS n
                RETURNING id, metadata
            )
            INSERT INTO {schema}.workflow_edges (workflow_id, parent_id, child_id)
            SELECT (s.metadata->>'workflow_id')::uuid, gen_random_uuid(), s.id FROM steps s"""
    )


async def test_the_release_and_the_workflow_end_walk_indexes_on_a_big_table(
    pg: PgTarget,
) -> None:
    schema = pg.schema
    backend = await PostgresBackend.connect(pg.dsn, schema)
    conn = await asyncpg.connect(pg.dsn)
    try:
        await _seed_history(conn, schema)
        # A running fan-out whose root succeeded: the hook's release of its 1,000 steps.
        workflow_id, root, steps = await _fan_out(backend)
        await conn.execute(
            f"UPDATE {schema}.jobs SET status = 'succeeded', finished_at = now() WHERE id = $1",
            root,
        )
        for table in ("jobs", "workflows", "workflow_edges"):
            await conn.execute(f"VACUUM ANALYZE {schema}.{table}")

        plans = {
            "release (hook)": await generic_plan(
                conn, render("release_steps", schema), RELEASE_TYPES,
                f"{_uuids([root])}, '{{}}'::uuid[], 'wake', 'events', '{{}}'::uuid[], {ONE_PART}",
                analyze=True,
            ),
            # A part after the first: the next 100 of the root's children after a step's id.
            "release (next part)": await generic_plan(
                conn, render("release_steps", schema), RELEASE_TYPES,
                f"'{{}}'::uuid[], '{{}}'::uuid[], 'wake', 'events', '{{}}'::uuid[], 100, "
                f"{_uuids([root])}, '{sorted(steps)[len(steps) // 10]}'::uuid",
                analyze=True,
            ),
            # The sweep's release: waiting steps named directly.
            "release (sweep)": await generic_plan(
                conn, render("release_steps", schema), RELEASE_TYPES,
                f"'{{}}'::uuid[], {_uuids(steps[:100])}, 'wake', 'events', '{{}}'::uuid[], "
                f"{ONE_PART}",
                analyze=True,
            ),

            "stale_workflow_steps": await generic_plan(
                conn, render("stale_workflow_steps", schema), "integer", "1000", analyze=True
            ),
        }  # fmt: skip
        # 100 steps ended: the join's gate counts them down, the workflow's end is checked.
        await conn.execute(
            f"UPDATE {schema}.jobs SET status = 'succeeded', finished_at = now() "
            "WHERE id = ANY($1::uuid[])",
            steps[:100],
        )
        plans["release (steps)"] = await generic_plan(
            conn, render("release_steps", schema), RELEASE_TYPES,
            f"{_uuids(steps[:100])}, '{{}}'::uuid[], 'wake', 'events', {_uuids([workflow_id])}, "
            f"{ONE_PART}",
            analyze=True,
        )  # fmt: skip
        for name, plan in plans.items():
            walked = scan_names(plan)
            for table in ("jobs", "workflows", "workflow_edges"):
                assert f"Seq Scan {table}" not in walked, (name, walked)
        # The release and the end read their own steps, not every step or waiting row kept.
        for name, bound in (
            ("release (hook)", 6 * FAN_OUT),
            ("release (sweep)", 6 * 100),
            ("release (steps)", 6 * 101),
            ("release (next part)", 6 * 100),  # its part, not every child after it
        ):
            assert _jobs_rows_read(plans[name]) <= bound, (name, scan_names(plans[name]))
        released = [
            node for node in _nodes(plans["release (hook)"]) if node["Node Type"] == "ModifyTable"
        ]
        assert max(node["Actual Rows"] for node in released) == FAN_OUT  # it released them
    finally:
        await conn.close()
        await backend.close()


RELEASE_TYPES = "uuid[], uuid[], text, text, uuid[], integer, uuid[], uuid"
# A whole release in one part (no earlier part to go on from).
ONE_PART = "1000, '{}'::uuid[], NULL"


def _jobs_rows_read(plan: dict[str, Any]) -> int:
    """Rows (or index entries) the plan's scans of jobs returned, over all their loops."""
    return sum(
        node["Actual Rows"] * node["Actual Loops"]
        for node in _nodes(plan)
        if "Scan" in node["Node Type"]
        and (node.get("Relation Name") == "jobs" or node.get("Index Name", "").startswith("jobs"))
    )


def _uuids(ids: list[UUID]) -> str:
    return "ARRAY[" + ", ".join(f"'{i}'" for i in ids) + "]::uuid[]"


async def test_a_release_decides_each_step_once_on_a_table_never_analyzed(pg: PgTarget) -> None:
    """A fan-out's root ends right after the enqueue, before any ANALYZE: the release of its
    1,000 steps aggregates each step's dependencies once (it re-aggregated all of them for
    every step: 2 s here, minutes for 10,000)."""
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    conn = await asyncpg.connect(pg.dsn)
    try:
        _, root, _ = await _fan_out(backend)
        await conn.execute(
            f"UPDATE {pg.schema}.jobs SET status = 'succeeded', finished_at = now() WHERE id = $1",
            root,
        )
        sql = render("release_steps", pg.schema)
        rolled_back = conn.transaction()  # a custom plan, as the pool's first runs use
        await rolled_back.start()
        try:
            raw = await conn.fetchval(
                f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}",
                [root],
                [],
                "wake",
                "events",
                [],
                2 * FAN_OUT,
                [],
                None,
            )
        finally:
            await rolled_back.rollback()
        custom = json.loads(raw)[0]["Plan"]
        generic = await generic_plan(
            conn, sql, RELEASE_TYPES,
            f"{_uuids([root])}, '{{}}'::uuid[], 'wake', 'events', '{{}}'::uuid[], "
            f"{2 * FAN_OUT}, '{{}}'::uuid[], NULL", analyze=True,
        )  # fmt: skip
        for plan in (custom, generic):
            handled = max(node["Actual Rows"] * node["Actual Loops"] for node in _nodes(plan))
            assert handled <= 2 * FAN_OUT, scan_names(plan)
            # Each gate is probed by its key alone: an array of every gate beside it is
            # sorted again at every probe (a 10,000-step release took 5.5 s so).
            gate_probes = [
                node.get("Index Cond", "")
                for node in _nodes(plan)
                if node.get("Relation Name") == "workflow_waits"
            ]
            assert gate_probes and not any("ANY" in cond for cond in gate_probes), gate_probes
    finally:
        await conn.close()
        await backend.close()


async def test_a_batch_upstream_read_probes_by_key_before_the_edges_are_analyzed(
    pg: PgTarget,
) -> None:
    """A worker reads the dependencies of the steps it claimed right after a big workflow's
    enqueue, before autovacuum analyzed its edges: one probe per dependency, not a hash of
    the whole jobs table per batch (5 ms for 32 steps of a 10,000-step fan-out; now 0.1 ms)."""
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    conn = await asyncpg.connect(pg.dsn)
    try:
        _, _, steps = await _fan_out(backend)
        await conn.execute(f"VACUUM ANALYZE {pg.schema}.jobs")  # the edges: never
        plan = await generic_plan(
            conn, render("get_upstreams", pg.schema), "uuid[]", _uuids(steps[:32]), analyze=True
        )
        assert "Seq Scan jobs" not in scan_names(plan), scan_names(plan)
        assert _jobs_rows_read(plan) <= 32, scan_names(plan)
    finally:
        await conn.close()
        await backend.close()


# --- dispatch after a big release ---------------------------------------------------------------
RELEASED = 5_000


def _whole_walks(plan: dict[str, Any]) -> list[str]:
    """Indexes of jobs walked whole (no condition on their keys)."""
    return [
        node["Index Name"]
        for node in _nodes(plan)
        if node.get("Relation Name") == "jobs"
        and "Index Name" in node
        and "Index Cond" not in node
        and node.get("Actual Loops", 0) > 0
    ]


@pytest.mark.parametrize("statement", ["dispatch_plain", "dispatch_batch"])
async def test_dispatch_stays_bounded_when_a_release_made_thousands_pending_since_analyze(
    pg: PgTarget, statement: str
) -> None:
    """The table was analyzed while the steps waited (autovacuum's usual timing), so its
    statistics say nothing is pending when the release makes 5,000 steps due. The claim must
    still find the candidates by id, not walk every pending row (which made each dispatch
    read the whole backlog: a 10,000-step fan-out drained at 81 jobs/s)."""
    backend = await PostgresBackend.connect(pg.dsn, pg.schema)
    conn = await asyncpg.connect(pg.dsn)
    try:
        workflow = Workflow("released")
        root = workflow.add("noop", {}, name="root")
        for n in range(RELEASED):
            workflow.add("noop", {"n": n}, name=f"s{n}", after=root)
        async with JobsClient(backend=backend) as client:
            run = await client.enqueue_workflow(workflow)
        await conn.execute(f"VACUUM ANALYZE {pg.schema}.jobs")
        await conn.execute(
            f"UPDATE {pg.schema}.jobs SET status = 'succeeded', finished_at = now() WHERE id = $1",
            run.jobs["root"],
        )
        assert (await backend.release_workflow_steps([run.jobs["root"]])).released == RELEASED

        await conn.execute("SET plan_cache_mode = force_generic_plan; SET jit = off")
        await conn.execute(
            f"PREPARE dispatch(text[], int, uuid, interval, int) AS {render(statement, pg.schema)}"
        )
        rolled_back = conn.transaction()
        await rolled_back.start()
        try:
            raw = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) "
                "EXECUTE dispatch(ARRAY['default'], 32, gen_random_uuid(), '60s', 2)"
            )
        finally:
            await rolled_back.rollback()
        plan = json.loads(raw)[0]["Plan"]
        assert _whole_walks(plan) == []
        read = sum(
            node["Actual Rows"] * node["Actual Loops"]
            for node in _nodes(plan)
            if node.get("Relation Name") == "jobs" and "Scan" in node["Node Type"]
        )
        assert read <= 32 * 2 * 4, read  # a few windows of limit * oversample, not 5,000
    finally:
        await conn.close()
        await backend.close()
