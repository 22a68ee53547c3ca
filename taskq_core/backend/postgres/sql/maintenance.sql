-- Maintenance: the leader's sweeps, the reclaim-event outbox cursor and leader election.
--
-- Sweeps take their rows with FOR UPDATE SKIP LOCKED, so a sweep never waits behind (or
-- deadlocks with) a worker's write; a row skipped now is picked up on the next pass. Each
-- sweep writes its events in the same statement and NOTIFYs the wake channel at most once.

-- name: scheduled_to_pending
-- Due scheduled jobs -> pending. scheduled_at is kept: it is the FIFO key once pending.
WITH due AS (
    SELECT j.id
    FROM {schema}.jobs j
    WHERE j.status = 'scheduled' AND j.scheduled_at <= clock_timestamp()
    FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', updated_at = clock_timestamp()
    FROM due d
    WHERE j.id = d.id
    RETURNING j.id
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status)
    SELECT m.id, 'state_change', 'scheduled', 'pending' FROM moved m
),
woken AS (
    SELECT pg_notify($1::text, '') WHERE EXISTS (SELECT 1 FROM moved)
)
SELECT (SELECT count(*) FROM moved) AS moved, (SELECT count(*) FROM woken) AS woken;

-- name: deadline_sweep
-- Waiting jobs whose schedule_to_close passed -> failed (DeadlineExceeded). No attempt ran,
-- so no attempt row.
WITH late AS (
    SELECT j.id, j.status
    FROM {schema}.jobs j
    WHERE j.status IN ('pending', 'scheduled') AND j.schedule_to_close < clock_timestamp()
    FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = 'failed', finished_at = k.now, updated_at = k.now,
        error_class = 'DeadlineExceeded',
        error_message = 'schedule_to_close passed before the job ran', error_traceback = NULL
    FROM late l CROSS JOIN (SELECT clock_timestamp() AS now) k
    WHERE j.id = l.id
    RETURNING j.id, l.status AS from_status
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status)
    SELECT m.id, 'state_change', m.from_status, 'failed' FROM moved m
)
SELECT count(*) FROM moved;

-- name: reclaim_expired_locks
-- Sweep 1: running jobs whose lease expired. With a cancel in flight the worker gets the
-- cancel graces ($1 cancel, $2 cleanup) plus 60s of headroom first, so a slow cancellation
-- is not taken for a crash. A requested cancel wins: the job ends cancelled. A job whose body
-- never started (claimed, started_at NULL) goes back to pending in its place without using an
-- attempt and without an attempt row; past $4 such reclaims it counts as started, so a job
-- that kills its worker before the start is recorded cannot loop forever. A started job with
-- retries left -> pending, else crashed, with a crashed attempt.
-- The 'reclaim' event is the outbox row `poll_reclaim_events` reads: its occurred_at comes
-- from the column default, stamped by the same INSERT that draws its id, which keeps ids
-- and times co-monotonic for the visibility-delay watermark.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
expired AS (
    SELECT j.id, j.locked_by_worker, j.attempt, j.started_at,
           j.started_at IS NOT NULL OR (
               SELECT count(*) FROM {schema}.job_events ev
               WHERE ev.job_id = j.id AND ev.kind = 'reclaim'
                 AND ev.detail ->> 'started' = 'false') >= $4::integer AS started,
           (j.retry_kind = 'transient' AND j.attempt < j.max_attempts)
           OR (j.retry_kind = 'indefinite'
               AND (j.schedule_to_close IS NULL OR j.schedule_to_close > k.now)) AS retry,
           j.cancel_requested_at IS NOT NULL AS cancel_requested
    FROM {schema}.jobs j CROSS JOIN clock k
    WHERE j.status = 'running'
      AND j.lock_expires_at < k.now
      AND (j.cancel_requested_at IS NULL
           OR j.lock_expires_at + $1::interval + $2::interval + interval '60 seconds' < k.now)
    FOR UPDATE OF j SKIP LOCKED
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = (CASE WHEN e.cancel_requested THEN 'cancelled'
                       WHEN NOT e.started OR e.retry THEN 'pending'
                       ELSE 'crashed' END)::{schema}.job_status,
        attempt = CASE WHEN e.started THEN j.attempt ELSE GREATEST(j.attempt - 1, 0) END,
        scheduled_at = CASE WHEN e.started AND e.retry AND NOT e.cancel_requested THEN k.now
                            ELSE j.scheduled_at END,
        finished_at = CASE WHEN e.cancel_requested OR (e.started AND NOT e.retry)
                           THEN k.now END,
        cancel_phase = CASE WHEN e.cancel_requested THEN j.cancel_phase ELSE 0 END,
        locked_by_worker = NULL, lock_expires_at = NULL,
        error_class = CASE WHEN e.started THEN 'WorkerCrashed' ELSE j.error_class END,
        error_message = CASE WHEN e.started
                             THEN 'the worker''s lock expired without a terminal write'
                             ELSE j.error_message END,
        error_traceback = CASE WHEN e.started THEN NULL ELSE j.error_traceback END,
        updated_at = k.now
    FROM expired e CROSS JOIN clock k
    WHERE j.id = e.id
    RETURNING j.id, j.status, e.locked_by_worker AS worker_id, e.attempt, e.started_at,
              e.started, k.now
),
attempts AS (
    INSERT INTO {schema}.job_attempts (
        job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms,
        error_class, error_message
    )
    SELECT m.id, m.attempt, m.worker_id, 'crashed', m.started_at, m.now,
           EXTRACT(EPOCH FROM m.now - m.started_at) * 1000,
           'WorkerCrashed', 'the worker''s lock expired without a terminal write'
    FROM moved m
    WHERE m.started
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, worker_id, detail)
    SELECT m.id, 'reclaim', 'running', m.status, m.worker_id,
           jsonb_build_object('from_state', 'running', 'to_state', m.status::text,
                              'reason', 'lock_expired', 'worker_id', m.worker_id::text,
                              'started', m.started)
    FROM moved m
    ORDER BY m.id
),
woken AS (
    SELECT pg_notify($3::text, '') WHERE EXISTS (SELECT 1 FROM moved)
)
SELECT (SELECT count(*) FROM moved) AS reclaimed, (SELECT count(*) FROM woken) AS woken;

-- name: expire_results
WITH expired AS (
    UPDATE {schema}.jobs
    SET result = NULL, result_expires_at = NULL, updated_at = clock_timestamp()
    WHERE result_expires_at < clock_timestamp()
    RETURNING id
)
SELECT count(*) FROM expired;

-- name: poll_reclaim_events
-- The reclaim outbox cursor: events after $1, oldest first, only once they are older than
-- the visibility delay $3. A transaction still holding a lower id has had at least that long
-- to commit, so the cursor never skips past it (at-least-once; consumers dedupe on id).
SELECT *
FROM {schema}.job_events
WHERE kind = 'reclaim' AND id > $1::bigint
  AND occurred_at <= clock_timestamp() - $3::interval
ORDER BY id
LIMIT $2::bigint;

-- name: leader_try_acquire
-- Take the session advisory lock ($1 = leader_lock_key) on the dedicated leader connection
-- and, when it was granted, upsert the leader row for worker $2 in the same statement.
WITH attempt AS (
    SELECT pg_try_advisory_lock(hashtextextended($1::text, 0)) AS granted
),
upserted AS (
    INSERT INTO {schema}.maintenance_leader AS l (name, worker_id, elected_at, last_seen_at)
    SELECT 'maintenance', $2::uuid, k.now, k.now
    FROM attempt a CROSS JOIN (SELECT clock_timestamp() AS now) k
    WHERE a.granted
    ON CONFLICT (name) DO UPDATE
    SET worker_id = EXCLUDED.worker_id,
        elected_at = CASE WHEN l.worker_id = EXCLUDED.worker_id THEN l.elected_at
                          ELSE EXCLUDED.elected_at END,
        last_seen_at = EXCLUDED.last_seen_at
    RETURNING l.name
)
SELECT a.granted, (SELECT count(*) FROM upserted) AS upserted
FROM attempt a;

-- name: leader_renew
-- Still leading (the lock lives as long as the connection): refresh the leader row.
INSERT INTO {schema}.maintenance_leader AS l (name, worker_id, elected_at, last_seen_at)
SELECT 'maintenance', $1::uuid, k.now, k.now
FROM (SELECT clock_timestamp() AS now) k
ON CONFLICT (name) DO UPDATE
SET worker_id = EXCLUDED.worker_id,
    elected_at = CASE WHEN l.worker_id = EXCLUDED.worker_id THEN l.elected_at
                      ELSE EXCLUDED.elected_at END,
    last_seen_at = EXCLUDED.last_seen_at;

-- name: leader_release
-- Step down: remove this worker's leader row and drop the session advisory lock.
WITH removed AS (
    DELETE FROM {schema}.maintenance_leader
    WHERE name = 'maintenance' AND worker_id = $2::uuid
    RETURNING name
)
SELECT pg_advisory_unlock(hashtextextended($1::text, 0)) AS unlocked,
       (SELECT count(*) FROM removed) AS removed;

-- name: get_leader
SELECT worker_id, elected_at, last_seen_at
FROM {schema}.maintenance_leader
WHERE name = 'maintenance';

-- name: connection_health_check
-- The notify listener's liveness probe on its dedicated LISTEN connection.
SELECT 1;
