-- Maintenance: the leader's sweeps, the reclaim-event outbox cursor and leader election.
--
-- Sweeps take their rows with FOR UPDATE SKIP LOCKED, so a sweep never waits behind (or
-- deadlocks with) a worker's write; a row skipped now is picked up on the next pass. Each
-- sweep writes its events in the same statement and NOTIFYs the wake channel at most once;
-- the reclaim sweep selects here and settles through `settle` (settle.sql) in the same
-- transaction, by the rules every other outcome follows.

-- name: get_next_due_in
-- Seconds until the earliest scheduled job is due (negative: overdue), NULL when none waits:
-- the first entry of jobs_scheduled_idx.
SELECT extract(epoch FROM min(j.scheduled_at) - clock_timestamp())::float8
FROM {schema}.jobs j
WHERE j.status = 'scheduled';

-- name: promote_scheduled_jobs
-- Due scheduled jobs -> pending. scheduled_at is kept: it is the FIFO key once pending.
-- The clock is read once (a subquery), so the bound is an index condition on
-- jobs_scheduled_idx: compared with clock_timestamp() itself, every scheduled row was read on
-- every pass. The update finds the due rows by id (`= ANY`), so the planner, which cannot
-- tell how many are due, never joins them against a scan of the whole table.
WITH due AS (
    SELECT j.id
    FROM {schema}.jobs j
    WHERE j.status = 'scheduled' AND j.scheduled_at <= (SELECT clock_timestamp())
    FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', updated_at = clock_timestamp()
    WHERE j.id = ANY (ARRAY(SELECT d.id FROM due d))
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

-- name: fail_overdue_jobs
-- Waiting jobs whose schedule_to_close passed -> failed (DeadlineExceeded). No attempt ran,
-- so no attempt row. As in promote_scheduled_jobs: the clock read once (an index condition
-- on jobs_deadline_idx), the update by id (never a join against a scan of the whole table).
WITH late AS (
    SELECT j.id, j.status
    FROM {schema}.jobs j
    WHERE j.status IN ('pending', 'scheduled')
      AND j.schedule_to_close < (SELECT clock_timestamp())
    FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = 'failed', finished_at = k.now, updated_at = k.now,
        error_class = 'DeadlineExceeded',
        error_message = 'schedule_to_close passed before the job ran', error_traceback = NULL
    FROM (SELECT clock_timestamp() AS now) k
    WHERE j.id = ANY (ARRAY(SELECT l.id FROM late l))
    RETURNING j.id
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status)
    SELECT m.id, 'state_change', l.status, 'failed' FROM moved m JOIN late l ON l.id = m.id
)
SELECT count(*) FROM moved;

-- name: expired_leases
-- The reclaim selects: running jobs whose lease expired, locked (SKIP LOCKED: a row a worker is
-- settling right now is left to the next pass) for the `settle` (outcome reclaimed) that
-- follows in the same transaction and decides where each goes. With a cancel in flight the
-- worker gets the cancel graces ($1 cancel, $2 cleanup) plus the headroom $3
-- (CANCEL_RECLAIM_HEADROOM) first, so a slow cancellation is not taken for a crash.
-- `blamed`: the worker's death is blamed on this job (backend/protocol/poison.py): its body's
-- start is recorded and no other running body of that worker started after it (ties by id).
-- The running rows are read along jobs_running_actor_idx (lock_expires_at is compared with
-- the volatile clock_timestamp(), never an index condition); the bodies of the expired rows'
-- workers in one more pass of it (`theirs`), not once per expired row.
WITH expired AS (
    SELECT j.id, j.attempt, j.locked_by_worker, j.started_at
    FROM {schema}.jobs j
    WHERE j.status = 'running'
      AND j.lock_expires_at < clock_timestamp()
      AND (j.cancel_requested_at IS NULL
           OR j.lock_expires_at + $1::interval + $2::interval + $3::interval
              < clock_timestamp())
    ORDER BY j.id
    FOR UPDATE OF j SKIP LOCKED
),
theirs AS (
    SELECT o.id, o.locked_by_worker, o.started_at
    FROM {schema}.jobs o
    WHERE o.status = 'running' AND o.started_at IS NOT NULL
      AND o.locked_by_worker = ANY (ARRAY(SELECT DISTINCT e.locked_by_worker FROM expired e))
)
SELECT e.id, e.attempt, e.locked_by_worker,
       e.started_at IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM theirs o
           WHERE o.locked_by_worker = e.locked_by_worker AND o.id <> e.id
             AND (o.started_at, o.id) > (e.started_at, e.id)) AS blamed
FROM expired e
ORDER BY e.id;

-- name: expire_results
-- One batch of the result TTL sweep: up to $1 jobs whose result_expires_at passed lose their
-- result. The pick walks jobs_result_expiry_idx oldest first, bounded by one clock reading;
-- a row a worker or a prune holds is skipped (SKIP LOCKED) and cleared on a later pass. A
-- step of a running workflow keeps its result, which the steps after it read
-- (ctx.upstream): it goes on the first pass after the workflow ended. The caller loops, one
-- commit per batch.
WITH k AS (
    SELECT clock_timestamp() AS now
),
due AS (
    SELECT j.id
    FROM {schema}.jobs j
    WHERE j.result_expires_at < (SELECT k.now FROM k)
      AND NOT EXISTS (  -- by the workflow's key; a value that is no id names none
          SELECT 1 FROM {schema}.workflows w
          WHERE w.id = (CASE WHEN j.metadata->>'workflow_id' ~* '^[0-9a-f-]{36}$'
                             THEN (j.metadata->>'workflow_id')::uuid END)
            AND w.status = 'running')
    ORDER BY j.result_expires_at
    LIMIT $1::bigint
    FOR UPDATE SKIP LOCKED
),
cleared AS (
    UPDATE {schema}.jobs j
    SET result = NULL, result_expires_at = NULL, updated_at = k.now
    FROM k
    WHERE j.id = ANY (ARRAY(SELECT d.id FROM due d))
    RETURNING j.id
)
SELECT count(*) FROM cleared;

-- name: delete_stale_workers
-- One batch of the stale worker cleanup: up to $2 `workers` rows not heard from for $1
-- (last_seen_at older than now - $1, stopped or vanished), oldest first along
-- workers_last_seen_idx, except a row that still holds a running job (the workers of the
-- running rows, read once along jobs_running_actor_idx): that row goes once the reclaim has
-- taken the job back.
--
-- Deleting is safe because nothing needs the row: no foreign key names workers (jobs,
-- job_attempts and job_events keep the id as plain history; reservation_slots carry their
-- own lease_expires_at; maintenance_leader is overwritten by the next election and its
-- leader touches its own workers row every heartbeat). A live worker is never stale: its
-- heartbeat refreshes last_seen_at, and a row its heartbeat is writing now is skipped
-- (SKIP LOCKED) or re-checked against its new last_seen_at (FOR UPDATE). The cutoff is read
-- once, in `k`, so it bounds the index scan instead of filtering each row.
WITH k AS (
    SELECT clock_timestamp() - $1::interval AS cutoff
),
doomed AS (
    SELECT w.id
    FROM {schema}.workers w
    WHERE w.last_seen_at < (SELECT k.cutoff FROM k)
      AND w.id <> ALL (ARRAY(
          SELECT DISTINCT j.locked_by_worker
          FROM {schema}.jobs j
          WHERE j.status = 'running' AND j.locked_by_worker IS NOT NULL))
    ORDER BY w.last_seen_at
    LIMIT $2::bigint
    FOR UPDATE OF w SKIP LOCKED
),
gone AS (
    DELETE FROM {schema}.workers w
    WHERE w.id = ANY (ARRAY(SELECT d.id FROM doomed d))
    RETURNING w.id
)
SELECT count(*) FROM gone;

-- name: list_waiting_queues
-- The queues holding pending jobs, by a loose index scan (a skip scan) of
-- jobs_fair_dispatch_idx, the dispatch index that holds every pending row led by queue:
-- each step jumps to the first queue after the last one found, so the cost follows the
-- number of queues, not the backlog. Scheduled jobs are not pending until promoted.
WITH RECURSIVE waiting AS (
    (
        SELECT j.queue
        FROM {schema}.jobs j
        WHERE j.status = 'pending'
        ORDER BY j.queue
        LIMIT 1
    )
    UNION ALL
    SELECT (
        SELECT j.queue
        FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.queue > w.queue
        ORDER BY j.queue
        LIMIT 1
    )
    FROM waiting w
    WHERE w.queue IS NOT NULL
)
SELECT w.queue FROM waiting w WHERE w.queue IS NOT NULL;

-- name: jobs_vacuum_due
-- Whether the jobs table ($1, schema-qualified) should be vacuumed now: at least $2 dead row
-- versions, at least a $3 share of its rows dead, and no vacuum of it running already. The
-- counts are the statistics collector's (flushed within seconds), not a scan.
SELECT s.n_dead_tup >= $2::bigint
       AND s.n_dead_tup >= $3::float8 * (s.n_live_tup + s.n_dead_tup)
       AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_vacuum v WHERE v.relid = s.relid)
FROM pg_stat_user_tables s
WHERE s.relid = $1::regclass;

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

-- name: get_latest_reclaim_event_id
-- Where a feed "from now" starts: the newest reclaim event's id (the end of
-- job_events_reclaim_idx), 0 when there is none.
SELECT COALESCE(max(id), 0) FROM {schema}.job_events WHERE kind = 'reclaim';

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

-- name: leader_session_lease
-- The leader's lease, enforced by the server on the dedicated leader connection: a session
-- that sends no statement for $1 milliseconds is ended, and its advisory lock with it. A
-- frozen leader (SIGSTOP, a VM pause) renews nothing, so its lock frees one lease after its
-- last renewal and another worker wins the next campaign; the kernel would keep the
-- connection itself open. For the session (false), not the transaction. PostgreSQL >= 14;
-- an older server refuses the name (42704).
SELECT set_config('idle_session_timeout', $1::text, false);

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
