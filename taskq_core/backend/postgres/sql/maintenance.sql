-- Maintenance: the leader's sweeps, the reclaim-event outbox cursor and leader election.
--
-- Sweeps take their rows with FOR UPDATE SKIP LOCKED, so a sweep never waits behind (or
-- deadlocks with) a worker's write; a row skipped now is picked up on the next pass. Each
-- sweep writes its events in the same statement and NOTIFYs the wake channel at most once;
-- the reclaim sweep selects here and settles through `settle` (settle.sql) in the same
-- transaction, by the rules every other outcome follows.

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

-- name: expired_leases
-- Sweep 1 selects: running jobs whose lease expired, locked (SKIP LOCKED: a row a worker is
-- settling right now is left to the next pass) for the `settle` (outcome reclaimed) that
-- follows in the same transaction and decides where each goes. With a cancel in flight the
-- worker gets the cancel graces ($1 cancel, $2 cleanup) plus the headroom $3
-- (CANCEL_RECLAIM_HEADROOM) first, so a slow cancellation is not taken for a crash.
SELECT j.id, j.attempt, j.locked_by_worker
FROM {schema}.jobs j
WHERE j.status = 'running'
  AND j.lock_expires_at < clock_timestamp()
  AND (j.cancel_requested_at IS NULL
       OR j.lock_expires_at + $1::interval + $2::interval + $3::interval < clock_timestamp())
ORDER BY j.id
FOR UPDATE OF j SKIP LOCKED;

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
