-- Batches: the batch rows, the outcome hook, the children's counts and the batch sweeps.
--
-- A batch's children are the jobs whose metadata.batch_id is its id as text. Every look at
-- them goes through jobs_batch_idx (migration 0010): the predicate `metadata ? 'batch_id'`
-- is written out beside the key so the partial index applies, and jobs outside a batch are
-- never read. JSON goes both ways as text (finalizer, metadata), so a caller's connection
-- works whatever its codecs. Time always comes from clock_timestamp(). A write to batches
-- finds its rows by the ids as one array, on the primary key: joined to a CTE or an unnest
-- instead, the generic plan scans the whole table.

-- name: create_batch
-- $1 id, $2 queue, $3 expected_size, $4 failure_threshold, $5 finalizer (jsonb text or NULL),
-- $6 metadata (jsonb text). No row back: the id exists already.
INSERT INTO {schema}.batches (
    id, queue, status, expected_size, outcomes_left, failure_threshold, finalizer, metadata,
    created_at
)
VALUES ($1::uuid, $2::text, 'active', $3::integer, $3::integer, $4::integer, $5::text::jsonb,
        $6::text::jsonb, clock_timestamp())
ON CONFLICT (id) DO NOTHING
RETURNING id, queue, status, expected_size, consecutive_failures, failure_threshold,
          finalizer->>'actor' AS finalizer_actor, finalizer_job_id, created_at, completed_at,
          metadata::text AS metadata;

-- name: get_batch
SELECT id, queue, status, expected_size, consecutive_failures, failure_threshold,
       finalizer->>'actor' AS finalizer_actor, finalizer_job_id, created_at, completed_at,
       metadata::text AS metadata
FROM {schema}.batches
WHERE id = $1::uuid;

-- name: lock_active_batches
-- The hook's first statement: the active rows among batches $1, locked in id order (two hooks
-- naming the same batches cannot deadlock). A hook that waited here for another's lock reads
-- the row as that one committed it: a batch it ended is no longer active and drops out.
SELECT id, consecutive_failures, failure_threshold, outcomes_left
FROM {schema}.batches
WHERE id = ANY ($1::uuid[]) AND status = 'active'
ORDER BY id
FOR UPDATE;

-- name: settle_batches
-- The hook's second statement, over the batches the first one locked: $1 ids, $2 their new
-- consecutive_failures, $3 whether that reached the threshold (abort), $5 their new
-- outcomes_left (children whose outcome no hook has seen; the probe below runs only once it
-- is 0 or less, see migration 0010). An aborted batch's
-- pending and scheduled children are cancelled as an operator's cancel ends them (locked in
-- id order, request time and reason on the row) with the abort's message $4 and a
-- state_change event; running children finish. Any other batch is complete when no child is
-- pending, scheduled or running (read in this statement's snapshot, taken after the lock, so
-- the last child's hook sees every sibling's committed end). Returns each batch it wrote
-- (a batch whose counter did not move and that stays active is not written: most hooks of a
-- big batch), its new status, its finalizer when it left active, and how many children it
-- cancelled.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
input AS (
    SELECT i.id, i.failures, i.abort, i.outcomes_left
    FROM unnest($1::uuid[], $2::integer[], $3::boolean[], $5::integer[])
        AS i(id, failures, abort, outcomes_left)
),
probed AS (
    SELECT i.id, i.failures, i.abort, i.outcomes_left,
           i.abort OR i.outcomes_left <= 0 AND NOT EXISTS (
               SELECT 1 FROM {schema}.jobs j
               WHERE j.metadata->>'batch_id' = i.id::text AND j.metadata ? 'batch_id'
                 AND j.status IN ('pending', 'scheduled', 'running')
           ) AS ends
    FROM input i
),
waiting AS (
    SELECT j.id, j.status, p.id AS batch_id
    FROM probed p
    JOIN {schema}.jobs j
      ON j.metadata->>'batch_id' = p.id::text AND j.metadata ? 'batch_id'
     AND j.status IN ('pending', 'scheduled')
    WHERE p.abort
    ORDER BY j.id
    FOR UPDATE OF j
),
cancelled AS (
    -- By primary key, the ids as one array: joined to `waiting` alone, the generic plan of a
    -- table full of one batch's pending children hashed a scan of every pending job, on every
    -- hook call (this CTE runs whether the batch aborts or not).
    UPDATE {schema}.jobs j
    SET status = 'cancelled', cancel_requested_at = k.now, cancel_reason = $4::text,
        error_message = $4::text, finished_at = k.now, updated_at = k.now
    FROM waiting w CROSS JOIN clock k
    WHERE j.id = ANY (ARRAY(SELECT x.id FROM waiting x)) AND j.id = w.id
      AND j.status IN ('pending', 'scheduled')
    RETURNING j.id, w.status AS from_status, w.batch_id
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, detail)
    SELECT c.id, 'state_change', c.from_status, 'cancelled'::{schema}.job_status,
           jsonb_build_object('reason', $4::text, 'batch_id', c.batch_id::text)
    FROM cancelled c
),
settled AS (
    UPDATE {schema}.batches b
    SET consecutive_failures = p.failures,
        outcomes_left = p.outcomes_left,
        status = CASE WHEN p.abort THEN 'aborted' WHEN p.ends THEN 'complete' ELSE b.status END,
        completed_at = CASE WHEN p.ends THEN k.now ELSE b.completed_at END
    FROM probed p CROSS JOIN clock k
    WHERE b.id = ANY ($1::uuid[]) AND b.id = p.id AND b.status = 'active'
      AND (p.ends OR b.consecutive_failures <> p.failures
           OR b.outcomes_left <> p.outcomes_left)  -- no write that changes nothing
    RETURNING b.id, b.status, CASE WHEN p.ends THEN b.finalizer::text END AS finalizer
)
SELECT s.id, s.status, s.finalizer,
       (SELECT count(*) FROM cancelled c WHERE c.batch_id = s.id) AS cancelled
FROM settled s;

-- name: complete_stale_batches
-- The leader's safety net: up to $1 active batches, oldest first, with no child pending,
-- scheduled or running become complete. Batches a hook holds are skipped (that hook decides
-- them); a row ended meanwhile is no longer active when locked and drops out.
WITH done AS (
    SELECT b.id
    FROM {schema}.batches b
    WHERE b.status = 'active'
      AND NOT EXISTS (
          SELECT 1 FROM {schema}.jobs j
          WHERE j.metadata->>'batch_id' = b.id::text AND j.metadata ? 'batch_id'
            AND j.status IN ('pending', 'scheduled', 'running')
      )
    ORDER BY b.created_at, b.id
    LIMIT $1::integer
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.batches b
SET status = 'complete', completed_at = clock_timestamp()
WHERE b.id = ANY (ARRAY(SELECT d.id FROM done d))
RETURNING b.id, b.created_at, b.finalizer::text AS finalizer;

-- name: set_batch_finalizers
-- The finalizers just enqueued for batches that left active: $1 batch ids, $2 job ids.
UPDATE {schema}.batches b
SET finalizer_job_id = f.job_id
FROM unnest($1::uuid[], $2::uuid[]) AS f(id, job_id)
WHERE b.id = ANY ($1::uuid[]) AND b.id = f.id;

-- name: count_batch_jobs
-- The children of batch $1 by status.
SELECT j.status::text AS status, count(*) AS count
FROM {schema}.jobs j
WHERE j.metadata->>'batch_id' = $1::uuid::text AND j.metadata ? 'batch_id'
GROUP BY j.status;

-- name: list_batches
-- Batches matching $1 queue, $2 active (NULL: any; true: active; false: ended), $3 id, newest
-- first, at most $4, each with its children's counts by status (one statement: a probe of
-- jobs_batch_idx per batch listed).
SELECT b.id, b.queue, b.status, b.expected_size, b.consecutive_failures, b.failure_threshold,
       b.finalizer->>'actor' AS finalizer_actor, b.finalizer_job_id, b.created_at,
       b.completed_at, b.metadata::text AS metadata, c.statuses, c.counts
FROM (
    SELECT *
    FROM {schema}.batches x
    WHERE ($1::text IS NULL OR x.queue = $1::text)
      AND ($2::boolean IS NULL OR (x.status = 'active') = $2::boolean)
      AND ($3::uuid IS NULL OR x.id = $3::uuid)
    ORDER BY x.created_at DESC, x.id DESC
    LIMIT $4::integer
) b
LEFT JOIN LATERAL (
    SELECT array_agg(s.status) AS statuses, array_agg(s.count) AS counts
    FROM (
        SELECT j.status::text AS status, count(*) AS count
        FROM {schema}.jobs j
        WHERE j.metadata->>'batch_id' = b.id::text AND j.metadata ? 'batch_id'
        GROUP BY j.status
    ) s
) c ON true
ORDER BY b.created_at DESC, b.id DESC;

-- name: prune_old_batches
-- One bounded batch of the prune: up to $2 complete or aborted batches that ended more than
-- $1 ago with no child left in the jobs table (their children pruned to the archive first),
-- oldest first along batches_ended_idx, bounded by one clock reading (the volatile
-- clock_timestamp() itself is never an index condition: every ended batch was read and
-- filtered); returns how many were deleted.
WITH due AS (
    SELECT b.id
    FROM {schema}.batches b
    WHERE b.status <> 'active'
      AND b.completed_at < (SELECT clock_timestamp()) - $1::interval
      AND NOT EXISTS (
          SELECT 1 FROM {schema}.jobs j
          WHERE j.metadata->>'batch_id' = b.id::text AND j.metadata ? 'batch_id'
      )
    ORDER BY b.completed_at
    LIMIT $2::integer
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM {schema}.batches b
    WHERE b.id = ANY (ARRAY(SELECT d.id FROM due d))
    RETURNING 1
)
SELECT count(*) FROM deleted;

-- name: list_batch_jobs
-- The children of batch $1 with a status in $2 (NULL: any), the most recently finished first
-- (unfinished ones by creation), at most $3: a walk of jobs_batch_idx, one batch's entries.
-- JobSummary columns: no payload, result or traceback.
SELECT {fragment:job_summary_columns}
FROM {schema}.jobs j
WHERE j.metadata->>'batch_id' = $1::uuid::text AND j.metadata ? 'batch_id'
  AND ($2::text[] IS NULL OR j.status::text = ANY ($2::text[]))
ORDER BY COALESCE(j.finished_at, j.created_at) DESC, j.id DESC
LIMIT $3::integer;
