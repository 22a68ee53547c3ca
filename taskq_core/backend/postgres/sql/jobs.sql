-- Jobs: enqueue, the worker's guarded writes (terminal, rescheduling, heartbeat, cancel
-- phases), operator cancel and retry, and the reads the client and CLI need.
--
-- Every status change writes its job_events row (and, for the end of an attempt, its
-- job_attempts row) in the SAME statement through data-modifying CTEs: one round trip, one
-- atomic write. Worker writes are fenced by their lease: status = 'running' AND
-- locked_by_worker = the worker AND attempt = the attempt it claimed. A lost race, a reclaimed
-- job or a later attempt updates nothing and the caller sees "not ours any more".
--
-- A cancel request wins on every later path: a job asked to cancel is never rescheduled (a
-- retry, snooze, retry-after or release ends it `cancelled` instead). Only a body that returns
-- normally keeps its result (`succeeded`): it finished its work.
--
-- started_at is NULL while a job is claimed but its body has not started; writes that end an
-- attempt whose start the worker had not recorded yet fill it in from the body's run time
-- ($n ran_for, seconds, NULL when the body never ran).
-- Time always comes from clock_timestamp() here, never from the application.

-- name: enqueue
-- One job. JSON travels as text and comes back as text ($4 payload, $13 metadata), so the
-- statement works on any asyncpg connection whatever jsonb codec it has. $6 delay, $9
-- schedule_to_close and $12 result_ttl are intervals; $16 is the wake channel, notified only
-- when the job is dispatchable now (the NOTIFY is delivered when the transaction commits).
WITH clock AS (
    SELECT clock_timestamp() AS now
),
inserted AS (
    INSERT INTO {schema}.jobs (
        id, actor, queue, payload, status, priority, scheduled_at, created_at, updated_at,
        identity_key, fairness_key, schedule_to_close, retry_kind, max_attempts, result_ttl,
        metadata, trace_id, span_id
    )
    SELECT $1::uuid, $2::text, $3::text, $4::text::jsonb,
           (CASE WHEN $6::interval > interval '0' THEN 'scheduled' ELSE 'pending' END)
               ::{schema}.job_status,
           $5::integer,
           CASE WHEN $6::interval > interval '0' THEN k.now + $6::interval ELSE k.now END,
           k.now, k.now, $7::text, $8::text, k.now + $9::interval, $10::text, $11::integer,
           $12::interval, $13::text::jsonb, $14::text, $15::text
    FROM clock k
    RETURNING *
),
woken AS (
    SELECT pg_notify($16::text, '') FROM inserted WHERE status = 'pending'
)
SELECT i.id, i.actor, i.queue, i.payload::text AS payload, i.status, i.priority, i.scheduled_at,
       i.created_at, i.retry_kind, i.max_attempts, i.attempt, i.locked_by_worker,
       i.lock_expires_at, i.claimed_at, i.started_at, i.finished_at, i.cancel_phase,
       i.cancel_requested_at,
       i.cancel_reason, i.identity_key, i.fairness_key, i.schedule_to_close,
       i.result::text AS result, i.result_ttl, i.result_expires_at, i.error_class,
       i.error_message, i.error_traceback, i.metadata::text AS metadata, i.trace_id, i.span_id,
       i.progress_seq, i.progress_state::text AS progress_state, i.updated_at,
       (SELECT count(*) FROM woken) AS woken
FROM inserted i;

-- name: copy_clock
-- Opens a bulk enqueue (enqueue_batch, enqueue_batch_fast: one COPY in one transaction): the
-- database clock, read once, so delays and deadlines resolve on the arbiter's time.
SELECT clock_timestamp() AS now;

-- name: copy_wake
-- Closes a bulk enqueue with a job dispatchable now: the one wake NOTIFY on channel $1 (COPY
-- cannot notify by itself), delivered only if the COPY's transaction commits.
SELECT pg_notify($1::text, '');

-- name: release_leases
-- A worker gives jobs back ($1 worker; $2 ids and $3 attempts: the leases): at a shutdown
-- drain (never started) or after losing its heartbeat ($7 reason). A job whose body never
-- started goes back to pending in its place (scheduled_at kept) without using its attempt; a
-- started one gets a crashed attempt ($5 error class, $6 message) and is scheduled at
-- now() + $4 when retries are left, else crashed. A requested cancel ends either `cancelled`.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
given AS (
    SELECT j.id, j.attempt, j.started_at, j.started_at IS NOT NULL AS started,
           j.cancel_requested_at IS NOT NULL AS cancel_requested,
           (j.retry_kind = 'transient' AND j.attempt < j.max_attempts)
           OR (j.retry_kind = 'indefinite'
               AND (j.schedule_to_close IS NULL OR j.schedule_to_close > k.now)) AS retry
    FROM unnest($2::uuid[], $3::integer[]) AS l(id, attempt)
    JOIN {schema}.jobs j ON j.id = l.id
    CROSS JOIN clock k
    WHERE j.status IS NOT DISTINCT FROM 'running'  -- by primary key: see mark_succeeded_many
      AND j.locked_by_worker IS NOT DISTINCT FROM $1::uuid AND j.attempt = l.attempt
    ORDER BY j.id
    FOR UPDATE OF j
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = (CASE WHEN g.cancel_requested THEN 'cancelled'
                       WHEN NOT g.started THEN 'pending'
                       WHEN g.retry THEN 'scheduled'
                       ELSE 'crashed' END)::{schema}.job_status,
        attempt = CASE WHEN g.started THEN j.attempt ELSE GREATEST(j.attempt - 1, 0) END,
        scheduled_at = CASE WHEN g.started AND g.retry AND NOT g.cancel_requested
                            THEN k.now + $4::interval ELSE j.scheduled_at END,
        finished_at = CASE WHEN g.cancel_requested OR (g.started AND NOT g.retry)
                           THEN k.now END,
        cancel_phase = CASE WHEN g.cancel_requested THEN j.cancel_phase ELSE 0 END,
        locked_by_worker = NULL, lock_expires_at = NULL,
        error_class = CASE WHEN g.started THEN $5::text ELSE j.error_class END,
        error_message = CASE WHEN g.started THEN $6::text ELSE j.error_message END,
        error_traceback = CASE WHEN g.started THEN NULL ELSE j.error_traceback END,
        updated_at = k.now
    FROM given g CROSS JOIN clock k
    WHERE j.id = g.id
    RETURNING j.id, j.status, g.attempt, g.started, g.started_at, k.now
),
attempts AS (
    INSERT INTO {schema}.job_attempts (
        job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms,
        error_class, error_message
    )
    SELECT m.id, m.attempt, $1::uuid, 'crashed', m.started_at, m.now,
           EXTRACT(EPOCH FROM m.now - m.started_at) * 1000, $5::text, $6::text
    FROM moved m
    WHERE m.started
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, worker_id, detail)
    SELECT m.id, 'state_change', 'running', m.status, $1::uuid,
           jsonb_build_object('reason', $7::text, 'started', m.started)
    FROM moved m
),
woken AS (
    SELECT pg_notify($8::text, '') WHERE EXISTS (SELECT 1 FROM moved WHERE status = 'pending')
)
SELECT (SELECT count(*) FROM moved) AS released, (SELECT count(*) FROM woken) AS woken;

-- name: heartbeat
-- One transaction per tick: touch the worker row ($1), extend the leases the worker still
-- holds ($4 ids, $5 attempts; by $2) and its reservation leases, ping the leader row when
-- leading ($3). Only those leases: a row the worker owns but no longer holds (a result it
-- could not write, a job it gave up) is left to expire. Returns one row per held lease that
-- is still the worker's, with `extended` and its cancel flags; a lease missing from the
-- answer was refused (reclaimed, or a later attempt).
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
    WHERE j.status IS NOT DISTINCT FROM 'running'  -- by primary key: see mark_succeeded_many
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
reservations AS (
    UPDATE {schema}.reservation_slots s SET lease_expires_at = k.now + $2::interval
    FROM clock k
    WHERE s.worker_id = $1::uuid
    RETURNING s.name
),
leader AS (
    UPDATE {schema}.maintenance_leader l SET last_seen_at = k.now
    FROM clock k
    WHERE $3::boolean AND l.name = 'maintenance' AND l.worker_id = $1::uuid
    RETURNING l.name
)
SELECT h.id AS job_id, e.id IS NOT NULL AS extended, h.cancel_phase, h.cancel_requested_at,
       h.cancel_reason,
       (SELECT count(*) FROM touched) + (SELECT count(*) FROM reservations)
           + (SELECT count(*) FROM leader) AS touched
FROM held h
LEFT JOIN extended e ON e.id = h.id
ORDER BY h.cancel_requested_at NULLS LAST, h.id;

-- name: mark_started_many
-- The bodies of these claimed jobs started ($2 ids, $3 attempts, $4 seconds each body has
-- run by now): started_at = now() - that, for leases still the worker's ($1) whose start is
-- not recorded yet. No event: a start is not a status change.
WITH started AS (
    UPDATE {schema}.jobs j
    SET started_at = clock_timestamp() - make_interval(secs => i.ran_for)
    FROM unnest($2::uuid[], $3::integer[], $4::float8[]) AS i(id, attempt, ran_for)
    WHERE j.id = i.id AND j.status IS NOT DISTINCT FROM 'running'  -- by primary key: see
      AND j.locked_by_worker IS NOT DISTINCT FROM $1::uuid          -- mark_succeeded_many
      AND j.attempt = i.attempt AND j.started_at IS NULL
    RETURNING j.id
)
SELECT s.id FROM started s;

-- name: mark_succeeded_many
-- running -> succeeded for a batch (mark_succeeded is a batch of one): $2 ids, $3 attempts,
-- $4 results (JSON text, encoded once by the worker), $5 fallback TTLs, $6 seconds each body
-- ran (parallel arrays). The result TTL is re-read from actor_config on every completion:
-- stored TTL, else the job's own, else the worker's fallback; none -> no expiry.
-- Rows are locked in id order so a flush never deadlocks with another multi-row writer. When
-- a finished job frees room under a max_concurrent cap (its actor's or its queue's), the
-- wake channel $7 is notified: another worker may be waiting for exactly that room.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
owned AS (
    -- The input rows carry their results into the lock step, so the UPDATE below joins
    -- nothing but these rows (joining the unnested arrays again compared every pair: n^2).
    SELECT j.id, i.result, i.fallback_ttl, i.ran_for
    FROM unnest($2::uuid[], $3::integer[], $4::text[], $5::interval[], $6::float8[])
        AS i(id, attempt, result, fallback_ttl, ran_for)
    JOIN {schema}.jobs j ON j.id = i.id
    -- IS NOT DISTINCT FROM: the same tests as =, but neither matches an index or a partial
    -- index's predicate, so each row is found by its primary key, never by scanning
    -- jobs_running_worker_idx, which keeps an entry for every job the worker ran since the
    -- last vacuum (thousands under load).
    WHERE j.status IS NOT DISTINCT FROM 'running'
      AND j.locked_by_worker IS NOT DISTINCT FROM $1::uuid AND j.attempt = i.attempt
    ORDER BY j.id
    FOR UPDATE OF j
),
done AS (
    UPDATE {schema}.jobs j
    SET status = 'succeeded', result = o.result::jsonb, finished_at = k.now, updated_at = k.now,
        lock_expires_at = NULL,
        started_at = COALESCE(j.started_at, k.now - make_interval(secs => o.ran_for)),
        result_expires_at = k.now + COALESCE(
            (SELECT ac.result_ttl FROM {schema}.actor_config ac WHERE ac.actor = j.actor),
            j.result_ttl, o.fallback_ttl)
    FROM owned o, clock k
    WHERE j.id = o.id
    RETURNING j.id, j.actor, j.queue, j.attempt, j.started_at, j.finished_at
),
attempt AS (
    INSERT INTO {schema}.job_attempts (
        job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms
    )
    SELECT d.id, d.attempt, $1::uuid, 'succeeded', d.started_at, d.finished_at,
           EXTRACT(EPOCH FROM d.finished_at - d.started_at) * 1000
    FROM done d
),
event AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, worker_id)
    SELECT d.id, 'state_change', 'running', 'succeeded', $1::uuid FROM done d
),
wake AS (
    SELECT pg_notify($7::text, '')
    WHERE EXISTS (
        SELECT 1 FROM done d
        WHERE EXISTS (SELECT 1 FROM {schema}.actor_config ac
                      WHERE ac.actor = d.actor AND ac.max_concurrent IS NOT NULL)
           OR EXISTS (SELECT 1 FROM {schema}.queues q
                      WHERE q.name = d.queue AND q.max_concurrent IS NOT NULL)
    )
)
SELECT d.id FROM done d LEFT JOIN wake ON true;

-- name: mark_failed_or_retry
-- The actor raised ($1 job, $2 worker, $3 attempt: the lease). $7 NULL -> failed. Otherwise
-- scheduled at now() + $7, unless that passes schedule_to_close -> failed as
-- DeadlineExceeded, or a cancel was requested -> cancelled. The decision and both timestamps
-- come from one clock reading. The attempt row keeps the actor's own error. $8: seconds the
-- body ran (fills started_at when its start was not recorded yet).
WITH clock AS (
    SELECT clock_timestamp() AS now
),
decision AS (
    SELECT x.id, k.now,
           CASE WHEN $7::interval IS NULL THEN 'fail'
                WHEN x.cancel_requested_at IS NOT NULL THEN 'cancel'
                WHEN x.schedule_to_close IS NOT NULL
                     AND k.now + $7::interval > x.schedule_to_close THEN 'deadline'
                ELSE 'retry' END AS verdict
    FROM {schema}.jobs x CROSS JOIN clock k
    WHERE x.id = $1::uuid
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = (CASE WHEN d.verdict = 'retry' THEN 'scheduled'
                       WHEN d.verdict = 'cancel' THEN 'cancelled'
                       ELSE 'failed' END)::{schema}.job_status,
        scheduled_at = CASE WHEN d.verdict = 'retry' THEN d.now + $7::interval
                            ELSE j.scheduled_at END,
        finished_at = CASE WHEN d.verdict = 'retry' THEN NULL ELSE d.now END,
        locked_by_worker = CASE WHEN d.verdict = 'retry' THEN NULL ELSE j.locked_by_worker END,
        lock_expires_at = NULL,
        -- A retry starts its next attempt unforced (a shutdown may have escalated this one).
        cancel_phase = CASE WHEN d.verdict = 'retry' THEN 0 ELSE j.cancel_phase END,
        started_at = COALESCE(j.started_at, d.now - make_interval(secs => $8::float8)),
        error_class = CASE WHEN d.verdict = 'deadline' THEN 'DeadlineExceeded'
                           ELSE $4::text END,
        error_message = CASE WHEN d.verdict = 'deadline'
                             THEN 'retry would start after schedule_to_close (last error: '
                                  || COALESCE($5::text, '') || ')'
                             ELSE $5::text END,
        error_traceback = $6::text,
        updated_at = d.now
    FROM decision d
    WHERE j.id = d.id AND j.status = 'running' AND j.locked_by_worker = $2::uuid
      AND j.attempt = $3::integer
    RETURNING j.*, d.verdict, d.now
),
attempt AS (
    INSERT INTO {schema}.job_attempts (
        job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms,
        error_class, error_message, error_traceback
    )
    SELECT m.id, m.attempt, $2::uuid,
           CASE WHEN m.verdict = 'retry' THEN 'retried' ELSE 'failed' END,
           m.started_at, m.now, EXTRACT(EPOCH FROM m.now - m.started_at) * 1000,
           $4::text, $5::text, $6::text
    FROM moved m
),
event AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, worker_id)
    SELECT m.id, 'state_change', 'running', m.status, $2::uuid FROM moved m
)
SELECT m.* FROM moved m;

-- name: mark_cancelled
-- running -> cancelled: the actor stopped after a cancel request ($1 job, $2 worker,
-- $3 attempt; $4 seconds the body ran).
WITH clock AS (
    SELECT clock_timestamp() AS now
),
done AS (
    UPDATE {schema}.jobs j
    SET status = 'cancelled', finished_at = k.now, updated_at = k.now, lock_expires_at = NULL,
        started_at = COALESCE(j.started_at, k.now - make_interval(secs => $4::float8))
    FROM clock k
    WHERE j.id = $1::uuid AND j.status = 'running' AND j.locked_by_worker = $2::uuid
      AND j.attempt = $3::integer
    RETURNING j.id, j.attempt, j.started_at, j.finished_at
),
attempt AS (
    INSERT INTO {schema}.job_attempts (
        job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms
    )
    SELECT d.id, d.attempt, $2::uuid, 'cancelled', d.started_at, d.finished_at,
           EXTRACT(EPOCH FROM d.finished_at - d.started_at) * 1000
    FROM done d
),
event AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, worker_id)
    SELECT d.id, 'state_change', 'running', 'cancelled', $2::uuid FROM done d
)
SELECT count(*) FROM done;

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

-- name: mark_abandoned
-- running with cancel_phase 2 -> abandoned: the forced cancel never finished ($1 job,
-- $2 worker, $3 attempt; $4 why, kept as the job's error message).
WITH clock AS (
    SELECT clock_timestamp() AS now
),
done AS (
    UPDATE {schema}.jobs j
    SET status = 'abandoned', finished_at = k.now, updated_at = k.now, lock_expires_at = NULL,
        started_at = COALESCE(j.started_at, k.now),
        error_class = 'Abandoned', error_message = $4::text, error_traceback = NULL
    FROM clock k
    WHERE j.id = $1::uuid AND j.status = 'running' AND j.locked_by_worker = $2::uuid
      AND j.attempt = $3::integer AND j.cancel_phase = 2
    RETURNING j.id, j.attempt, j.started_at, j.finished_at
),
attempt AS (
    INSERT INTO {schema}.job_attempts (
        job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms,
        error_class, error_message
    )
    SELECT d.id, d.attempt, $2::uuid, 'abandoned', d.started_at, d.finished_at,
           EXTRACT(EPOCH FROM d.finished_at - d.started_at) * 1000, 'Abandoned', $4::text
    FROM done d
),
event AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, worker_id, detail)
    SELECT d.id, 'state_change', 'running', 'abandoned', $2::uuid,
           jsonb_build_object('reason', $4::text)
    FROM done d
)
SELECT count(*) FROM done;

-- name: mark_snoozed
-- Snooze ($1 job, $2 worker, $3 attempt): scheduled at now() + $4 without consuming the
-- attempt (attempt - 1, metadata snooze_count + 1); past schedule_to_close -> failed as
-- DeadlineExceeded instead; a requested cancel -> cancelled. $5: seconds the body ran.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
decision AS (
    SELECT x.id, k.now,
           CASE WHEN x.cancel_requested_at IS NOT NULL THEN 'cancel'
                WHEN x.schedule_to_close IS NOT NULL
                     AND k.now + $4::interval > x.schedule_to_close THEN 'deadline'
                ELSE 'snooze' END AS verdict
    FROM {schema}.jobs x CROSS JOIN clock k
    WHERE x.id = $1::uuid
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = (CASE WHEN d.verdict = 'snooze' THEN 'scheduled'
                       WHEN d.verdict = 'cancel' THEN 'cancelled'
                       ELSE 'failed' END)::{schema}.job_status,
        scheduled_at = CASE WHEN d.verdict = 'snooze' THEN d.now + $4::interval
                            ELSE j.scheduled_at END,
        finished_at = CASE WHEN d.verdict <> 'snooze' THEN d.now END,
        attempt = CASE WHEN d.verdict = 'snooze' THEN GREATEST(j.attempt - 1, 0)
                       ELSE j.attempt END,
        metadata = CASE WHEN d.verdict <> 'snooze' THEN j.metadata
                        ELSE jsonb_set(j.metadata, '{snooze_count}', to_jsonb(
                            COALESCE((j.metadata ->> 'snooze_count')::integer, 0) + 1))
                   END,
        locked_by_worker = CASE WHEN d.verdict <> 'snooze' THEN j.locked_by_worker END,
        lock_expires_at = NULL,
        cancel_phase = CASE WHEN d.verdict = 'snooze' THEN 0 ELSE j.cancel_phase END,
        started_at = COALESCE(j.started_at, d.now - make_interval(secs => $5::float8)),
        error_class = CASE WHEN d.verdict = 'deadline' THEN 'DeadlineExceeded'
                           ELSE j.error_class END,
        error_message = CASE WHEN d.verdict = 'deadline'
                             THEN 'snooze would start after schedule_to_close'
                             ELSE j.error_message END,
        error_traceback = CASE WHEN d.verdict = 'deadline' THEN NULL ELSE j.error_traceback END,
        updated_at = d.now
    FROM decision d
    WHERE j.id = d.id AND j.status = 'running' AND j.locked_by_worker = $2::uuid
      AND j.attempt = $3::integer
    RETURNING j.id, j.status, j.attempt, j.started_at, d.now, d.verdict
),
attempt AS (
    INSERT INTO {schema}.job_attempts (
        job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms,
        error_class, error_message
    )
    SELECT m.id, CASE WHEN m.verdict = 'snooze' THEN m.attempt + 1 ELSE m.attempt END,
           $2::uuid,
           CASE m.verdict WHEN 'snooze' THEN 'snoozed' WHEN 'cancel' THEN 'cancelled'
                ELSE 'failed' END,
           m.started_at, m.now, EXTRACT(EPOCH FROM m.now - m.started_at) * 1000,
           CASE WHEN m.verdict = 'deadline' THEN 'DeadlineExceeded' END,
           CASE WHEN m.verdict = 'deadline' THEN 'snooze would start after schedule_to_close'
           END
    FROM moved m
),
event AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, worker_id)
    SELECT m.id, 'state_change', 'running', m.status, $2::uuid FROM moved m
)
SELECT m.status::text FROM moved m;

-- name: mark_retry_after
-- RetryAfter ($1 job, $2 worker, $3 attempt): scheduled at now() + $4. A requested cancel ->
-- cancelled (checked first); past schedule_to_close -> failed (DeadlineExceeded); with $5
-- consume_budget a transient job whose attempt >= max_attempts -> failed
-- (MaxAttemptsExceeded); without it the attempt is given back (attempt - 1). A shutdown
-- interruption is a retry-after of 0 without budget. $6: seconds the body ran.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
decision AS (
    SELECT x.id, k.now, x.cancel_requested_at IS NOT NULL AS cancel,
           CASE WHEN x.schedule_to_close IS NOT NULL
                     AND k.now + $4::interval > x.schedule_to_close THEN 'DeadlineExceeded'
                WHEN $5::boolean AND x.retry_kind = 'transient'
                     AND x.attempt >= x.max_attempts THEN 'MaxAttemptsExceeded'
           END AS failure,
           CASE WHEN x.schedule_to_close IS NOT NULL
                     AND k.now + $4::interval > x.schedule_to_close
                THEN 'retry-after would start after schedule_to_close'
                ELSE 'all ' || x.max_attempts || ' attempts used; retry-after refused'
           END AS failure_message
    FROM {schema}.jobs x CROSS JOIN clock k
    WHERE x.id = $1::uuid
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = (CASE WHEN d.cancel THEN 'cancelled'
                       WHEN d.failure IS NULL THEN 'scheduled'
                       ELSE 'failed' END)::{schema}.job_status,
        scheduled_at = CASE WHEN d.failure IS NULL AND NOT d.cancel
                            THEN d.now + $4::interval ELSE j.scheduled_at END,
        finished_at = CASE WHEN d.cancel OR d.failure IS NOT NULL THEN d.now END,
        attempt = CASE WHEN d.failure IS NULL AND NOT d.cancel AND NOT $5::boolean
                       THEN GREATEST(j.attempt - 1, 0) ELSE j.attempt END,
        locked_by_worker = CASE WHEN d.cancel OR d.failure IS NOT NULL
                                THEN j.locked_by_worker END,
        lock_expires_at = NULL,
        -- Only a rescheduled job starts its next attempt unforced; a terminal one keeps it.
        cancel_phase = CASE WHEN d.cancel OR d.failure IS NOT NULL THEN j.cancel_phase ELSE 0 END,
        started_at = COALESCE(j.started_at, d.now - make_interval(secs => $6::float8)),
        error_class = CASE WHEN d.cancel THEN j.error_class
                           ELSE COALESCE(d.failure, j.error_class) END,
        error_message = CASE WHEN d.cancel OR d.failure IS NULL THEN j.error_message
                             ELSE d.failure_message END,
        error_traceback = CASE WHEN d.cancel OR d.failure IS NULL THEN j.error_traceback END,
        updated_at = d.now
    FROM decision d
    WHERE j.id = d.id AND j.status = 'running' AND j.locked_by_worker = $2::uuid
      AND j.attempt = $3::integer
    RETURNING j.id, j.status, j.attempt, j.started_at, d.now, d.cancel, d.failure,
              d.failure_message
),
attempt AS (
    INSERT INTO {schema}.job_attempts (
        job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms,
        error_class, error_message
    )
    SELECT m.id,
           CASE WHEN m.failure IS NULL AND NOT m.cancel AND NOT $5::boolean
                THEN m.attempt + 1 ELSE m.attempt END,
           $2::uuid,
           CASE WHEN m.cancel THEN 'cancelled'
                WHEN m.failure IS NULL THEN 'retry_after' ELSE 'failed' END,
           m.started_at, m.now, EXTRACT(EPOCH FROM m.now - m.started_at) * 1000,
           CASE WHEN NOT m.cancel THEN m.failure END,
           CASE WHEN NOT m.cancel AND m.failure IS NOT NULL THEN m.failure_message END
    FROM moved m
),
event AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, worker_id)
    SELECT m.id, 'state_change', 'running', m.status, $2::uuid FROM moved m
)
SELECT CASE WHEN m.cancel THEN 'cancelled'
            WHEN m.failure IS NULL THEN 'scheduled' ELSE 'failed:' || m.failure END
FROM moved m;

-- name: cancel_where
-- Cancel the newest $5 non-terminal jobs matching the filter ($1 statuses or NULL, $2 queue,
-- $3 actor, $4 ids), locked in id order so concurrent bulk writers cannot deadlock:
-- pending/scheduled -> cancelled at once; running -> cancel_phase 1 and a NOTIFY on the
-- events channel ($7) for the worker that holds it. A single-job cancel is this with $4.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
matched AS (
    SELECT j.id
    FROM {schema}.jobs j
    WHERE j.status IN ('pending', 'scheduled', 'running')
      AND ($1::text[] IS NULL OR j.status = ANY ($1::text[]::{schema}.job_status[]))
      AND ($2::text IS NULL OR j.queue = $2::text)
      AND ($3::text IS NULL OR j.actor = $3::text)
      AND ($4::uuid[] IS NULL OR j.id = ANY ($4::uuid[]))
    ORDER BY j.created_at DESC, j.id DESC
    LIMIT $5::bigint
),
target AS (
    SELECT j.id, j.status, j.cancel_requested_at
    FROM {schema}.jobs j
    JOIN matched m ON m.id = j.id
    WHERE j.status IN ('pending', 'scheduled', 'running')
    ORDER BY j.id
    FOR UPDATE OF j
),
cancelled AS (
    UPDATE {schema}.jobs j
    SET status = 'cancelled', cancel_requested_at = k.now, cancel_reason = $6::text,
        finished_at = k.now, updated_at = k.now
    FROM target t CROSS JOIN clock k
    WHERE j.id = t.id AND t.status IN ('pending', 'scheduled')
    RETURNING j.id, t.status AS from_status
),
requested AS (
    UPDATE {schema}.jobs j
    SET cancel_phase = 1, cancel_requested_at = k.now, cancel_reason = $6::text,
        updated_at = k.now
    FROM target t CROSS JOIN clock k
    WHERE j.id = t.id AND t.status = 'running' AND t.cancel_requested_at IS NULL
    RETURNING j.id, j.locked_by_worker
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, detail)
    SELECT c.id, 'cancel_request', c.from_status, 'cancelled'::{schema}.job_status,
           jsonb_build_object('reason', $6::text)
    FROM cancelled c
    UNION ALL
    SELECT r.id, 'cancel_request', 'running'::{schema}.job_status,
           'running'::{schema}.job_status,
           jsonb_build_object('reason', $6::text, 'cancel_phase', 1)
    FROM requested r
),
notified AS (
    SELECT pg_notify($7::text, json_build_object(
               'type', 'cancel', 'job_id', r.id, 'worker_id', r.locked_by_worker)::text)
    FROM requested r
)
SELECT (SELECT count(*) FROM cancelled) AS cancelled,
       (SELECT count(*) FROM requested) AS requested,
       (SELECT count(*) FROM notified) AS notified;

-- name: poll_cancel_flags
SELECT j.id AS job_id, j.cancel_phase, j.cancel_requested_at, j.cancel_reason
FROM {schema}.jobs j
WHERE j.status = 'running' AND j.locked_by_worker = $1::uuid
  AND j.cancel_requested_at IS NOT NULL
ORDER BY j.cancel_requested_at, j.id;

-- name: retry_jobs
-- Operator retry of the newest $5 failed/crashed/cancelled jobs matching the filter (as in
-- `cancel_where`): back to pending with a fresh attempt budget and a clean slate. One NOTIFY.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
matched AS (
    SELECT j.id, j.status
    FROM {schema}.jobs j
    WHERE j.status IN ('failed', 'crashed', 'cancelled')
      AND ($1::text[] IS NULL OR j.status = ANY ($1::text[]::{schema}.job_status[]))
      AND ($2::text IS NULL OR j.queue = $2::text)
      AND ($3::text IS NULL OR j.actor = $3::text)
      AND ($4::uuid[] IS NULL OR j.id = ANY ($4::uuid[]))
    ORDER BY j.created_at DESC, j.id DESC
    LIMIT $5::bigint
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', attempt = 0, scheduled_at = k.now, started_at = NULL,
        finished_at = NULL, result = NULL, result_expires_at = NULL, locked_by_worker = NULL,
        lock_expires_at = NULL, cancel_phase = 0, cancel_requested_at = NULL,
        cancel_reason = NULL, error_class = NULL, error_message = NULL,
        error_traceback = NULL, updated_at = k.now
    FROM matched m CROSS JOIN clock k
    WHERE j.id = m.id AND j.status IN ('failed', 'crashed', 'cancelled')
    RETURNING j.id, m.status AS from_status
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, detail)
    SELECT m.id, 'state_change', m.from_status, 'pending', '{"reason": "operator_retry"}'::jsonb
    FROM moved m
),
woken AS (
    SELECT pg_notify($6::text, '') WHERE EXISTS (SELECT 1 FROM moved)
)
SELECT (SELECT count(*) FROM moved) AS retried, (SELECT count(*) FROM woken) AS woken;

-- name: get_job
SELECT * FROM {schema}.jobs WHERE id = $1::uuid;

-- name: use_custom_plans
-- For operator filter queries inside their own transaction: plan for the actual arguments.
SET LOCAL plan_cache_mode = force_custom_plan;

-- name: list_jobs
-- $1 statuses (NULL: any; empty: none), $2 queue, $3 actor, $4 ids, $5 limit (NULL: all).
SELECT *
FROM {schema}.jobs j
WHERE ($1::text[] IS NULL OR j.status = ANY ($1::text[]::{schema}.job_status[]))
  AND ($2::text IS NULL OR j.queue = $2::text)
  AND ($3::text IS NULL OR j.actor = $3::text)
  AND ($4::uuid[] IS NULL OR j.id = ANY ($4::uuid[]))
ORDER BY j.created_at DESC, j.id DESC
LIMIT $5::bigint;

-- name: get_attempts
SELECT * FROM {schema}.job_attempts WHERE job_id = $1::uuid ORDER BY id;

-- name: get_events
SELECT * FROM {schema}.job_events WHERE job_id = $1::uuid ORDER BY id;

-- name: count_by_queue_status
SELECT queue, status, count(*) AS count
FROM {schema}.jobs
GROUP BY queue, status
ORDER BY queue, status;

-- name: has_active_jobs
-- The drain monitor's question, answered by the first index entry found, not a count.
SELECT EXISTS (SELECT 1 FROM {schema}.jobs
               WHERE status = 'pending' AND queue = ANY ($1::text[]))
    OR EXISTS (SELECT 1 FROM {schema}.jobs
               WHERE status IN ('scheduled', 'running') AND queue = ANY ($1::text[]));

-- name: count_active_jobs
-- Two counts, so each half has its index: pending rows live in the dispatch indexes, the
-- others in jobs_status_queue_idx.
SELECT (SELECT count(*) FROM {schema}.jobs
        WHERE status = 'pending' AND queue = ANY ($1::text[]))
     + (SELECT count(*) FROM {schema}.jobs
        WHERE status IN ('scheduled', 'running') AND queue = ANY ($1::text[]));

-- name: count_pending_jobs
SELECT actor, count(*) AS count
FROM {schema}.jobs
WHERE status IN ('pending', 'scheduled') AND actor = ANY ($1::text[])
GROUP BY actor
ORDER BY actor;
