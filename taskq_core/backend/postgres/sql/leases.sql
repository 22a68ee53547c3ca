-- Leases: what a worker does to the jobs it holds between the claim (dispatch.sql) and the
-- settle (settle.sql): renew the leases in its heartbeat, record that bodies started, read
-- and escalate cancel requests.
--
-- Every write is fenced by the lease: status = 'running' AND locked_by_worker = the worker
-- AND attempt = the attempt it claimed; a lease that is not the row's any more writes nothing.
-- started_at is NULL while a job is claimed but its body has not started.
-- Time always comes from clock_timestamp() here, never from the application.

-- name: heartbeat
-- One transaction per tick: touch the worker row ($1), extend the leases the worker still
-- holds ($4 ids, $5 attempts; by $2), ping the leader row when leading ($3). Only those
-- leases: a row the worker owns but no longer holds (a result it could not write, a job it
-- gave up) is left to expire. Returns one row per held lease that
-- is still the worker's, with `extended` and its cancel flags; a lease missing from the
-- answer was refused (reclaimed, or a later attempt). With no lease held it still returns one
-- row (job_id NULL), so `registered` (the worker row was there to touch) always arrives.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
touched AS (
    UPDATE {schema}.workers w SET last_seen_at = k.now
    FROM clock k
    WHERE w.id = $1::uuid
    RETURNING w.id
),
held AS (
    SELECT j.id, j.attempt, j.cancel_phase, j.cancel_requested_at, j.cancel_reason
    FROM unnest($4::uuid[], $5::integer[]) AS h(id, attempt)
    JOIN {schema}.jobs j ON j.id = h.id
    WHERE j.status IS NOT DISTINCT FROM 'running'  -- by primary key: see settle.sql
      AND j.locked_by_worker IS NOT DISTINCT FROM $1::uuid AND j.attempt = h.attempt
),
-- Rows a completion flush holds right now are skipped: they are being finished, and a
-- multi-row writer waiting on another could deadlock.
lockable AS (
    SELECT j.id
    FROM {schema}.jobs j
    JOIN held h ON h.id = j.id
    WHERE j.status IS NOT DISTINCT FROM 'running'
      AND j.locked_by_worker IS NOT DISTINCT FROM $1::uuid AND j.attempt = h.attempt
    ORDER BY j.id
    FOR UPDATE OF j SKIP LOCKED
),
extended AS (
    UPDATE {schema}.jobs j SET lock_expires_at = k.now + $2::interval, updated_at = k.now
    FROM clock k, lockable l
    WHERE j.id = l.id
    RETURNING j.id
),
leader AS (
    UPDATE {schema}.maintenance_leader l SET last_seen_at = k.now
    FROM clock k
    WHERE $3::boolean AND l.name = 'maintenance' AND l.worker_id = $1::uuid
    RETURNING l.name
)
SELECT h.id AS job_id, e.id IS NOT NULL AS extended, h.cancel_phase, h.cancel_requested_at,
       h.cancel_reason, EXISTS (SELECT 1 FROM touched) AS registered
FROM (SELECT 1) one
LEFT JOIN (held h LEFT JOIN extended e ON e.id = h.id) ON true
ORDER BY h.cancel_requested_at NULLS LAST, h.id NULLS LAST;

-- name: mark_started_many
-- The bodies of these claimed jobs started ($2 ids, $3 attempts, $4 seconds each body has
-- run by now): started_at = now() - that, for leases still the worker's ($1) whose start is
-- not recorded yet. No event: a start is not a status change. One clock for the call, as
-- the memory backend's: bodies marked with the same ran_for share a start, and the reclaim's
-- blame breaks that tie by id (a clock read per row would order them by the plan's row order).
WITH clock AS (
    SELECT clock_timestamp() AS now
),
started AS (
    UPDATE {schema}.jobs j
    SET started_at = k.now - make_interval(secs => i.ran_for)
    FROM unnest($2::uuid[], $3::integer[], $4::float8[]) AS i(id, attempt, ran_for)
    CROSS JOIN clock k
    WHERE j.id = i.id AND j.status IS NOT DISTINCT FROM 'running'  -- by primary key: see
      AND j.locked_by_worker IS NOT DISTINCT FROM $1::uuid          -- settle.sql
      AND j.attempt = i.attempt AND j.started_at IS NULL
    RETURNING j.id
)
SELECT s.id FROM started s;

-- name: record_lost_attempts
-- Bodies that ran under leases worker $1 lost before their outcome was written ($2 ids, $3
-- attempts, $4 and $5 seconds before now each began and ended, $6 how the lease was lost):
-- one 'lost' attempt row each, so the history lists every body that ran. None where the job
-- has a row for that attempt already (its reclaim or release wrote one) or is gone (the
-- archive took it). Nothing else is written: the job is whoever holds it now's. Returns how
-- many rows were added. Rare by nature: it runs only after a stall or a refused lease.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
added AS (
    INSERT INTO {schema}.job_attempts (
        job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms,
        error_class, error_message
    )
    SELECT i.id, i.attempt, $1::uuid, 'lost', k.now - make_interval(secs => i.started_ago),
           k.now - make_interval(secs => i.ended_ago),
           GREATEST(i.started_ago - i.ended_ago, 0) * 1000, 'LeaseLost', i.reason
    FROM unnest($2::uuid[], $3::integer[], $4::float8[], $5::float8[], $6::text[])
        AS i(id, attempt, started_ago, ended_ago, reason)
    CROSS JOIN clock k
    WHERE EXISTS (SELECT 1 FROM {schema}.jobs j WHERE j.id = i.id)
      AND NOT EXISTS (SELECT 1 FROM {schema}.job_attempts a
                      WHERE a.job_id = i.id AND a.attempt = i.attempt)
    RETURNING 1
)
SELECT count(*) FROM added;

-- name: write_cancel_escalation
-- Cancel phase -> 2 (forced), written BEFORE the worker cancels the task: from 1 after an
-- operator's cancel outlived its grace, from 0 when a shutdown forces the job ($4 reason).
WITH escalated AS (
    UPDATE {schema}.jobs j
    SET cancel_phase = 2, updated_at = clock_timestamp()
    FROM (SELECT x.cancel_phase AS before FROM {schema}.jobs x WHERE x.id = $1::uuid) b
    WHERE j.id = $1::uuid AND j.status = 'running' AND j.locked_by_worker = $2::uuid
      AND j.attempt = $3::integer AND j.cancel_phase < 2
    RETURNING j.id, b.before
),
event AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, worker_id, detail)
    SELECT e.id, 'state_change', 'running', 'running', $2::uuid,
           jsonb_build_object('cancel_phase_from', e.before, 'cancel_phase_to', 2,
                              'reason', $4::text)
    FROM escalated e
)
SELECT count(*) FROM escalated;

-- name: poll_cancel_flags
-- Running jobs of worker $1 with a cancel requested, oldest request first, along
-- jobs_cancel_requested_idx (which holds only those).
SELECT j.id AS job_id, j.cancel_phase, j.cancel_requested_at, j.cancel_reason
FROM {schema}.jobs j
WHERE j.status = 'running' AND j.locked_by_worker = $1::uuid
  AND j.cancel_requested_at IS NOT NULL
ORDER BY j.cancel_requested_at, j.id;
