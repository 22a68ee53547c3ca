-- Workflows: the workflow rows, the steps' edges, the release and the workflow's end.
--
-- A workflow's steps are the jobs whose metadata.workflow_id is its id as text: every look at
-- them goes through jobs_workflow_idx (migration 0017), with the predicate
-- `metadata ? 'workflow_id'` written beside the key so the partial index applies. Ids travel
-- as arrays and are matched with = ANY on a primary key or an index (an ARRAY(...) of a
-- subquery is one initplan): joined to an unnest instead, the generic plan scans the table.
-- Time always comes from clock_timestamp().

-- name: create_workflow
-- $1 id, $2 name, $3 metadata (jsonb text). No row back: the id exists already.
INSERT INTO {schema}.workflows (id, name, metadata, created_at)
VALUES ($1::uuid, $2::text, $3::text::jsonb, clock_timestamp())
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: insert_workflow_edges
-- Workflow $1's edges (child $3[i] waits for parent $2[i]) and, for each child with $4
-- (GATED_DEPENDENCIES) parents or more, its count of the parents that have not ended
-- (migration 0019; a graft's parent may have ended already).
WITH edges AS (
    INSERT INTO {schema}.workflow_edges (workflow_id, parent_id, child_id)
    SELECT $1::uuid, e.parent_id, e.child_id
    FROM unnest($2::uuid[], $3::uuid[]) AS e (parent_id, child_id)
    RETURNING parent_id, child_id
)
INSERT INTO {schema}.workflow_waits (child_id, workflow_id, parents_left)
SELECT e.child_id, $1::uuid,
       count(*) FILTER (WHERE p.status IN ('waiting', 'pending', 'scheduled', 'running'))
FROM edges e
LEFT JOIN {schema}.jobs p ON p.id = e.parent_id
GROUP BY e.child_id
HAVING count(*) >= $4::integer;

-- name: lock_workflow
-- Graft (create_workflow_steps): the workflow's row, locked, so two grafts take names one after
-- the other; and which of the names $2 its steps hold already.
SELECT w.id, w.status,
       ARRAY(SELECT j.metadata->>'workflow_step' FROM {schema}.jobs j
             WHERE j.metadata ? 'workflow_id' AND j.metadata->>'workflow_id' = $1::uuid::text
               AND j.metadata->>'workflow_step' = ANY ($2::text[])) AS taken
FROM {schema}.workflows w
WHERE w.id = $1::uuid
FOR UPDATE OF w;

-- name: reopen_workflow
-- A workflow that gets new steps (a graft) or retried ones runs again.
UPDATE {schema}.workflows
SET status = 'running', finished_at = NULL,
    cancel_requested_at = CASE WHEN $2::boolean THEN NULL ELSE cancel_requested_at END
WHERE id = $1::uuid;

-- name: release_steps
-- The release rule (protocol.workflows.decide_step; a conformance test holds the two
-- together): decide every waiting child of the jobs $1 and every waiting step of $2. Rows are
-- locked in id order; a step another release moved meanwhile is no longer 'waiting' and drops
-- out, so a step is released once however many of its parents end together. A released step
-- is 'pending' (its scheduled_at now) or 'scheduled' while the start its options asked for is
-- ahead; a cancelled one names the first dependency that ended without success. $3 is the
-- wake channel (one NOTIFY when a step became pending), $4 the events channel (the earliest
-- scheduled one is announced, as an enqueue does). One row per step moved; $6, $7, $8: see
-- `more` below.
-- The same statement ends the running workflows among those of the jobs $1 and the
-- workflows $5 whose steps all ended: 'cancelled' after a cancel_workflow, 'succeeded' when
-- every step did, else 'failed' (one row each, decision 'ended'). It reads the statuses as
-- they were before this statement, so a workflow in which it moved a step is not ended here:
-- a step it released runs yet, and one it cancelled is decided again by the caller's next
-- pass (its children), whose end check sees it. Such a workflow's row is not locked either:
-- this statement holds locks on its steps, and a cancel_workflow locks the workflow first.
-- Which workflows are finished is read without locks (a workflow that goes on is not
-- locked, a row lock being a WAL record and a wait for other workers); those are locked in
-- id order, and one another call ended meanwhile is no longer running.
-- A gated child of the ended jobs (workflow_waits, counted down here, locked in id order) is
-- decided only once its gate says no dependency is left, or when one of them ended without
-- success: the last of a join's thousand parents reads its dependencies, not each. A child
-- with too few dependencies for a gate is decided at each parent's end.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
ended AS (
    -- Driven by the ended jobs' ids on both sides (primary keys): a plain join may hash the
    -- whole of jobs while the edges have no statistics yet.
    SELECT e.child_id, count(*) AS n, bool_or(p.status <> 'succeeded') AS unhappy
    FROM {schema}.jobs p
    JOIN {schema}.workflow_edges e ON e.parent_id = p.id
    WHERE p.id = ANY ($1::uuid[]) AND e.parent_id = ANY ($1::uuid[])
    GROUP BY e.child_id
),
gates AS (
    SELECT w.child_id
    FROM {schema}.workflow_waits w
    WHERE w.child_id = ANY (ARRAY(SELECT d.child_id FROM ended d))
    ORDER BY w.child_id
    FOR UPDATE OF w
),
-- The gates are locked first, all of them, in id order: the count of `gates` is a one-time
-- filter, run before the first row. (Naming their ids as `child_id = ANY (ARRAY(...))` beside
-- the join key made every primary key probe sort that array again: a root's release of 10,000
-- steps took 5.5 s here.)
counted AS (
    UPDATE {schema}.workflow_waits w
    SET parents_left = w.parents_left - d.n
    FROM ended d
    WHERE w.child_id = d.child_id AND (SELECT count(*) FROM gates) >= 0
    RETURNING w.child_id, w.parents_left, d.unhappy
),
-- At most $6 candidates a pass, so a fan-out's first steps are pending (and claimed) while
-- the rest are decided: a pass that took $6 says where it stopped ('more', the last id) and
-- the next goes on with the next $6 children of the jobs $7 (the first pass's $1) after the
-- id $8, read along the edges' primary key. Everything up to `last` was decided: the
-- candidates up to their last when they filled the pass, the children read up to theirs.
resumed AS (
    SELECT e.child_id
    FROM {schema}.workflow_edges e
    WHERE e.parent_id = ANY ($7::uuid[]) AND e.child_id > $8::uuid
    ORDER BY e.child_id
    LIMIT $6::integer
),
candidates AS (
    SELECT j.id, j.scheduled_at, j.metadata->>'workflow_requires' AS requires
    FROM {schema}.jobs j
    WHERE j.id = ANY (ARRAY(
              SELECT c.child_id FROM counted c WHERE c.parents_left <= 0 OR c.unhappy
              UNION
              SELECT d.child_id FROM ended d
              WHERE NOT EXISTS (SELECT 1 FROM {schema}.workflow_waits w
                                WHERE w.child_id = d.child_id)
              UNION
              SELECT unnest($2::uuid[])
              UNION
              SELECT r.child_id FROM resumed r))
      AND j.status::text = 'waiting'  -- as text: by id, never a walk of every waiting row
    ORDER BY j.id
    LIMIT $6::integer
    FOR UPDATE OF j
),
more AS (  -- (no max(uuid) before PostgreSQL 16)
    SELECT least(
               CASE WHEN (SELECT count(*) FROM resumed) >= $6::integer
                    THEN (SELECT r.child_id FROM resumed r ORDER BY r.child_id DESC LIMIT 1)
               END,
               CASE WHEN (SELECT count(*) FROM candidates) >= $6::integer
                    THEN (SELECT c.id FROM candidates c ORDER BY c.id DESC LIMIT 1)
               END) AS last
),
-- Each candidate's dependencies in one aggregate, grouped by the candidate (a candidate
-- without edges has one row of NULLs, which counts as nothing). Not a second CTE joined
-- back to the candidates: inlined into that join, the aggregate ran once per candidate.
parents AS (
    SELECT c.id, c.scheduled_at, c.requires,
           bool_and(e.parent_id IS NULL OR coalesce(p.status = 'succeeded', false))
               AS all_succeeded,
           bool_and(e.parent_id IS NULL
                    OR coalesce(p.status IN ('succeeded', 'failed', 'cancelled', 'crashed',
                                             'abandoned'), true)) AS all_ended,
           (array_agg(coalesce(p.metadata->>'workflow_step', e.parent_id::text) || ' '
                      || coalesce(p.status::text, 'is gone') ORDER BY e.parent_id)
              FILTER (WHERE e.parent_id IS NOT NULL
                        AND (p.status IS NULL
                             OR p.status IN ('failed', 'cancelled', 'crashed', 'abandoned'))))[1]
               AS failed_dependency
    FROM candidates c
    LEFT JOIN {schema}.workflow_edges e ON e.child_id = c.id
    LEFT JOIN {schema}.jobs p ON p.id = e.parent_id
    GROUP BY c.id, c.scheduled_at, c.requires
),
decided AS (
    SELECT p.id, p.scheduled_at, p.failed_dependency,
           CASE WHEN p.requires = 'finished'
                THEN CASE WHEN p.all_ended THEN 'release' ELSE 'wait' END
                WHEN p.failed_dependency IS NOT NULL THEN 'cancel'
                WHEN p.all_succeeded THEN 'release'
                ELSE 'wait' END AS decision
    FROM parents p
),
released AS (
    UPDATE {schema}.jobs j
    SET status = (CASE WHEN d.scheduled_at > k.now THEN 'scheduled' ELSE 'pending' END)
                 ::{schema}.job_status,
        scheduled_at = greatest(d.scheduled_at, k.now), updated_at = k.now
    FROM decided d CROSS JOIN clock k
    WHERE j.id = d.id AND d.decision = 'release'
    RETURNING j.id, j.status, j.scheduled_at, j.metadata->>'workflow_id' AS workflow_id
),
cancelled AS (
    UPDATE {schema}.jobs j
    SET status = 'cancelled', finished_at = k.now, updated_at = k.now,
        cancel_requested_at = k.now, cancel_reason = 'dependency ' || d.failed_dependency
    FROM decided d CROSS JOIN clock k
    WHERE j.id = d.id AND d.decision = 'cancel'
    RETURNING j.id, j.status, j.scheduled_at, j.metadata->>'workflow_id' AS workflow_id,
              j.cancel_reason
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, detail)
    SELECT r.id, 'released', 'waiting'::{schema}.job_status, r.status, '{}'::jsonb
    FROM released r
    UNION ALL
    SELECT c.id, 'state_change', 'waiting'::{schema}.job_status,
           'cancelled'::{schema}.job_status, jsonb_build_object('reason', c.cancel_reason)
    FROM cancelled c
),
finished AS (
    SELECT w.id
    FROM {schema}.workflows w
    WHERE w.id = ANY (ARRAY(
              -- By id only (a job outside a workflow gives NULL, which matches nothing):
              -- with `metadata ? 'workflow_id'` beside it the planner may AND in a walk of
              -- every step's entry in jobs_workflow_idx.
              SELECT (j.metadata->>'workflow_id')::uuid FROM {schema}.jobs j
              WHERE j.id = ANY ($1::uuid[])
              UNION
              SELECT unnest($5::uuid[])
              EXCEPT
              SELECT r.workflow_id::uuid FROM released r
              EXCEPT
              SELECT c.workflow_id::uuid FROM cancelled c))
      AND w.status = 'running'
      AND NOT EXISTS (
          SELECT 1 FROM {schema}.jobs j
          WHERE j.metadata ? 'workflow_id' AND j.metadata->>'workflow_id' = w.id::text
            AND j.status IN ('waiting', 'pending', 'scheduled', 'running'))
),
touched AS (
    SELECT w.id, w.cancel_requested_at
    FROM {schema}.workflows w
    WHERE w.id = ANY (ARRAY(SELECT f.id FROM finished f)) AND w.status = 'running'
    ORDER BY w.id
    FOR UPDATE OF w
),
done AS (
    SELECT t.id,
           CASE WHEN t.cancel_requested_at IS NOT NULL THEN 'cancelled'
                WHEN EXISTS (SELECT 1 FROM {schema}.jobs j
                             WHERE j.metadata ? 'workflow_id' AND j.metadata->>'workflow_id' = t.id::text
                               AND j.status <> 'succeeded') THEN 'failed'
                ELSE 'succeeded' END AS status
    FROM touched t
),
ended_workflows AS (
    UPDATE {schema}.workflows w
    SET status = d.status, finished_at = clock_timestamp()
    FROM done d
    WHERE w.id = d.id
    RETURNING w.id, w.status
),
woken AS (
    SELECT pg_notify($3::text, '') WHERE EXISTS (SELECT 1 FROM released WHERE status = 'pending')
),
announced AS (
    SELECT pg_notify($4::text, {fragment:scheduled_event})
    FROM (SELECT min(scheduled_at) AS scheduled_at FROM released WHERE status = 'scheduled') r
    CROSS JOIN clock k
    WHERE r.scheduled_at IS NOT NULL
)
SELECT 'released' AS decision, r.id, r.workflow_id::uuid AS workflow_id, NULL AS status
FROM released r
UNION ALL
SELECT 'cancelled', c.id, c.workflow_id::uuid, NULL FROM cancelled c
UNION ALL
SELECT 'ended', NULL, e.id, e.status::text FROM ended_workflows e
UNION ALL
SELECT 'more', m.last, NULL, NULL FROM more m WHERE m.last IS NOT NULL
UNION ALL
-- Never a row: it makes the two NOTIFY CTEs run (a CTE nobody reads is not evaluated).
SELECT 'notified', NULL, NULL, NULL
FROM (SELECT (SELECT count(*) FROM woken) + (SELECT count(*) FROM announced) AS n) x
WHERE x.n < 0;

-- name: stale_workflow_steps
-- The leader's sweep: up to $1 waiting steps of running workflows that a release would move
-- (every dependency ended, or one ended without success or is gone), and up to $1 running
-- workflows none of whose steps is left to end. Read without locks: the release and the end
-- lock what they write, so a pass over a big waiting backlog that nothing can move writes
-- nothing (a row lock is a WAL record).
SELECT ARRAY(
           SELECT j.id
           FROM {schema}.workflows w
           JOIN {schema}.jobs j
             ON j.metadata ? 'workflow_id' AND j.metadata->>'workflow_id' = w.id::text
            AND j.status = 'waiting'
           WHERE w.status = 'running'
             AND (NOT EXISTS (
                      SELECT 1 FROM {schema}.workflow_edges e
                      JOIN {schema}.jobs p ON p.id = e.parent_id
                      WHERE e.child_id = j.id
                        AND p.status IN ('waiting', 'pending', 'scheduled', 'running'))
                  OR EXISTS (
                      SELECT 1 FROM {schema}.workflow_edges e
                      LEFT JOIN {schema}.jobs p ON p.id = e.parent_id
                      WHERE e.child_id = j.id
                        AND (p.id IS NULL
                             OR p.status IN ('failed', 'cancelled', 'crashed', 'abandoned'))))
           ORDER BY w.id, j.id
           LIMIT $1::integer) AS steps,
       ARRAY(
           SELECT w.id FROM {schema}.workflows w
           WHERE w.status = 'running'
             AND NOT EXISTS (
                 SELECT 1 FROM {schema}.jobs j
                 WHERE j.metadata ? 'workflow_id' AND j.metadata->>'workflow_id' = w.id::text
                   AND j.status IN ('waiting', 'pending', 'scheduled', 'running'))
           ORDER BY w.id LIMIT $1::integer) AS workflows;

-- name: workflow_step_ids
-- Workflow $1's steps whose status is one of $2 (all when NULL).
SELECT j.id
FROM {schema}.jobs j
WHERE j.metadata ? 'workflow_id' AND j.metadata->>'workflow_id' = $1::uuid::text
  AND ($2::text[] IS NULL OR j.status::text = ANY ($2::text[]))
ORDER BY j.id;

-- name: request_workflow_cancel
-- cancel_workflow's mark: the workflow ends 'cancelled'. No row: no such workflow.
UPDATE {schema}.workflows
SET cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp())
WHERE id = $1::uuid
RETURNING id, status;

-- name: retry_workflow_steps
-- retry_workflow: workflow $1's failed, crashed and cancelled steps wait again, with a fresh
-- attempt budget and a clean slate (as retry_jobs); the release decides them after.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
target AS (
    SELECT j.id, j.status
    FROM {schema}.jobs j
    WHERE j.metadata ? 'workflow_id' AND j.metadata->>'workflow_id' = $1::uuid::text
      AND j.status IN ('failed', 'crashed', 'cancelled')
    ORDER BY j.id
    FOR UPDATE OF j
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = 'waiting', uncounted_attempts = j.attempt, scheduled_at = k.now,
        started_at = NULL, finished_at = NULL, result = NULL, result_expires_at = NULL,
        locked_by_worker = NULL, lock_expires_at = NULL, cancel_phase = 0,
        cancel_requested_at = NULL, cancel_reason = NULL, error_class = NULL,
        error_message = NULL, error_traceback = NULL, updated_at = k.now
    FROM target t CROSS JOIN clock k
    WHERE j.id = t.id
    RETURNING j.id, t.status AS from_status
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, detail)
    SELECT m.id, 'state_change', m.from_status, 'waiting'::{schema}.job_status,
           '{"reason": "workflow_retry"}'::jsonb
    FROM moved m
)
SELECT m.id FROM moved m;

-- name: hold_released_dependents
-- retry_workflow, after retry_workflow_steps: a step released on the end of one of the steps
-- $1 it retried (one that requires only its dependencies' end) and not handed out yet
-- (pending, scheduled) waits for them again; the release decides it after. A step a worker
-- claimed meanwhile is no longer pending once its row lock is had, and is left alone.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
target AS (
    SELECT j.id, j.status
    FROM {schema}.jobs j
    WHERE j.id = ANY (ARRAY(
              SELECT e.child_id FROM {schema}.workflow_edges e WHERE e.parent_id = ANY ($1::uuid[])))
      AND j.status IN ('pending', 'scheduled')
    ORDER BY j.id
    FOR UPDATE OF j
),
held AS (
    UPDATE {schema}.jobs j
    SET status = 'waiting', updated_at = k.now
    FROM target t CROSS JOIN clock k
    WHERE j.id = t.id
    RETURNING j.id, t.status AS from_status
)
INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, detail)
SELECT h.id, 'state_change', h.from_status, 'waiting'::{schema}.job_status,
       '{"reason": "workflow_retry"}'::jsonb
FROM held h;

-- fragment: workflow_counts
-- The steps' counts of workflow `w` by status, as a JSON object's text.
(SELECT json_object_agg(c.status, c.n)::text FROM (
     SELECT j.status, count(*) AS n FROM {schema}.jobs j
     WHERE j.metadata ? 'workflow_id' AND j.metadata->>'workflow_id' = w.id::text
     GROUP BY j.status) c) AS counts

-- name: get_workflow
SELECT w.id, w.name, w.status, w.created_at, w.finished_at, w.cancel_requested_at,
       w.metadata::text AS metadata, {fragment:workflow_counts}
FROM {schema}.workflows w
WHERE w.id = $1::uuid;

-- name: list_workflows
-- Newest first; $1 status or NULL, $2 limit.
SELECT w.id, w.name, w.status, w.created_at, w.finished_at, w.cancel_requested_at,
       w.metadata::text AS metadata, {fragment:workflow_counts}
FROM {schema}.workflows w
WHERE $1::text IS NULL OR w.status = $1::text
ORDER BY w.created_at DESC, w.id DESC
LIMIT $2::integer;

-- name: list_workflow_steps
-- Workflow $1's steps in the order they were added (their ids are time-ordered), each with
-- the names of the steps it waits for.
SELECT j.id, j.actor, j.queue, j.status, j.attempt, j.created_at, j.started_at,
       j.finished_at, j.error_class, j.error_message, j.cancel_reason,
       j.metadata->>'workflow_step' AS name, j.metadata->>'workflow_requires' AS requires,
       ARRAY(SELECT coalesce(p.metadata->>'workflow_step', e.parent_id::text)
             FROM {schema}.workflow_edges e
             LEFT JOIN {schema}.jobs p ON p.id = e.parent_id
             WHERE e.child_id = j.id
             ORDER BY e.parent_id) AS after
FROM {schema}.jobs j
WHERE j.metadata ? 'workflow_id' AND j.metadata->>'workflow_id' = $1::uuid::text
ORDER BY j.id;

-- name: get_upstream
-- Step $1's dependencies: name, status, result (JSON text) and error, in one read.
SELECT p.id, coalesce(p.metadata->>'workflow_step', p.id::text) AS name, p.status,
       p.result::text AS result, p.error_class, p.error_message
FROM {schema}.workflow_edges e
JOIN {schema}.jobs p ON p.id = e.parent_id
WHERE e.child_id = $1::uuid;

-- name: list_step_dependencies
-- Step $1's dependencies: name, job and status, no result (what explain and a job's page
-- read), in name order.
SELECT p.id, coalesce(p.metadata->>'workflow_step', p.id::text) AS name, p.status
FROM {schema}.workflow_edges e
JOIN {schema}.jobs p ON p.id = e.parent_id
WHERE e.child_id = $1::uuid
ORDER BY coalesce(p.metadata->>'workflow_step', p.id::text) COLLATE "C", p.id;

-- name: get_upstreams
-- get_upstream of the steps $1 (a worker's claimed batch), each row naming its step. Each
-- dependency is a probe of the primary key (the LATERAL's LIMIT keeps it one): a plain join
-- hashed the whole of jobs whenever the edges had no statistics yet.
SELECT e.child_id, p.id, coalesce(p.metadata->>'workflow_step', p.id::text) AS name,
       p.status, p.result::text AS result, p.error_class, p.error_message
FROM {schema}.workflow_edges e
CROSS JOIN LATERAL (
    SELECT p.id, p.metadata, p.status, p.result, p.error_class, p.error_message
    FROM {schema}.jobs p
    WHERE p.id = e.parent_id
    LIMIT 1) p
WHERE e.child_id = ANY ($1::uuid[]);
