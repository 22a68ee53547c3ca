-- Settle: the ONE statement that ends or reschedules a claimed attempt, for every outcome and
-- every caller (success, failure, retry, snooze, retry-after, cancel, a shutdown's interrupt,
-- abandon, a worker's release, the leader's reclaim). River's JobSetStateIfRunningMany is the
-- model.
--
-- Every rule of what an outcome does lives here once:
--   * the lease fences each row: running, locked by the row's worker, at the row's attempt (a
--     lost race, a reclaimed job or a later attempt updates nothing: "not ours any more");
--   * a requested cancel wins over every rescheduling (retry, snooze, retry-after, release,
--     reclaim): the job ends `cancelled`. Only a body that returned keeps its result, and a
--     plain failure stays `failed`;
--   * a rescheduling that would start after schedule_to_close fails as DeadlineExceeded;
--   * an attempt number is never given back (the next claim's is higher, so no two bodies share
--     one): an attempt that spends no retry budget adds one to uncounted_attempts instead, and
--     the attempts used are attempt - uncounted_attempts;
--   * retries left (taskq_core.retry.retries_left): transient while the attempts used are
--     below max_attempts, indefinite until schedule_to_close, non_retryable never;
--   * an attempt interrupted by a graceful shutdown (interrupted) uses no budget and goes back
--     to pending in its place; one that did not stop in time (abandoned) goes back to pending
--     like a crash while retries remain, else ends abandoned; only an operator's cancel makes
--     it abandoned (or cancelled) at once;
--   * a give-back (release, reclaim) of a job whose body never started uses no budget,
--     leaves it pending in its place and writes no attempt row; such a reclaim adds one to
--     jobs.unstarted_reclaims (its next worker then records the start before the body runs),
--     and a reclaimed job counts as started once that count reached $16
--     (UNSTARTED_RECLAIM_LIMIT), so it cannot loop forever;
--   * a crash is blamed on a job only with evidence, which the reclaim sweep weighs ($14):
--     its body's start was recorded and no other body of that worker started after it (the
--     worker died before starting another job's: a job that kills its worker at once, or one
--     that ran alone). A kill storm that ends workers at random blames one job per death;
--   * a job reclaimed after its $17-th crash blamed on it in a row is a poison job: failed
--     (PoisonJob) instead of handed to another worker (TASKQ_POISON_RECLAIMS; NULL or 0:
--     never). In a row: since the job's last operator retry and since its last started
--     reclaim that was not blamed on it (a poison job takes down every worker it runs on; a
--     job that a random death hit now and then does not); the rule is poison.py's;
--   * each settled row gets its job_attempts row (when an attempt ran) and its job_events row,
--     except a success: the job row tells it whole (its worker, attempt, start and finish),
--     and the reads give its event and attempt back from the row (`get_events`,
--     `get_attempts`), as the in-memory backend does (protocol.history).
-- Time is one clock_timestamp() reading per statement, never the application's.
-- `settle_succeeded` below is this statement's success branch written out for the hot path
-- (a batch of successes); a test holds the two copies together.

-- fragment: held_a_capped_slot
-- Whether the job `e` that ended (its actor and queue) held a slot of an actor or a queue
-- with max_concurrent: its end then wakes the dispatchers, whose capped claims wait for a
-- slot rather than for a new job.
(EXISTS (SELECT 1 FROM {schema}.actor_config ac
         WHERE ac.actor = e.actor AND ac.max_concurrent IS NOT NULL)
 OR EXISTS (SELECT 1 FROM {schema}.queues q
            WHERE q.name = e.queue AND q.max_concurrent IS NOT NULL))

-- name: settle
-- One row per lease, parallel arrays: $1 job ids, $2 attempts, $3 workers (the lease), $4 the
-- requested outcome (succeeded, failed, retry, snooze, retry_after, cancelled, interrupted,
-- abandoned, released, reclaimed), $5 delay (retry, snooze, retry_after, released), $6
-- consume_budget (retry_after), $7 result JSON text (succeeded), $8 fallback result TTL
-- (succeeded), $9 seconds the body ran (dates started_at when its start was not recorded;
-- NULL: never ran), $10..$12 error class, message and traceback (the actor's, or the
-- caller's for abandoned, released and reclaimed), $13 reason (event detail of interrupted,
-- abandoned, released, reclaimed (NULL: the sweep's lock_expired) and, when given,
-- retry_after: the limit that held a job back), $14 whether the sweep blames the worker's
-- death on the job (reclaimed; see expired_leases in maintenance.sql). $15 is the wake
-- channel: notified when a job became pending, a reclaim freed what a dead worker held, or a
-- finished job freed room under a max_concurrent cap (a worker may be waiting for it). $16
-- UNSTARTED_RECLAIM_LIMIT, $17 the poison limit (only the leader's reclaim sweep passes one).
-- $18 is the events channel: a rescheduled job (a retry's backoff, a snooze, an actor's
-- retry-after, a release) is announced there as an enqueue announces one, so the leader
-- promotes it when due. A rate limit's denial (a retry-after with a reason) is not: denials
-- come by the thousand, and the leader's passes, each reading the next due time, already
-- follow the limit's line. $19 is DENIAL_GRID in seconds: a denial is due again at the next
-- multiple of it on this clock, so a limit's line comes due in steps the leader promotes
-- together (constants.DENIAL_GRID), never past schedule_to_close (the deadline rule reads the
-- unrounded time).
-- Nothing here reads other rows of the worker: each row is found by its primary key.
-- Returns one row per settled lease: its id, its new status and, when a rule failed it, the
-- rule's error class (DeadlineExceeded, MaxAttemptsExceeded, PoisonJob).
WITH clock AS (
    SELECT clock_timestamp() AS now
),
owned AS (
    -- The input rows carry their values into the lock step, so the UPDATE below joins
    -- nothing but these rows (joining the unnested arrays again compared every pair: n^2).
    SELECT j.id, i.attempt, i.worker_id, i.outcome, i.delay, i.consume_budget, i.result,
           i.fallback_ttl, i.ran_for, i.error_class, i.error_message, i.error_traceback,
           i.reason, j.started_at AS started_before, j.actor, j.queue, j.retry_kind,
           j.max_attempts, j.attempt - j.uncounted_attempts AS attempts_used,
           j.schedule_to_close, j.cancel_requested_at IS NOT NULL AS cancel,
           -- Whether a body ran in this attempt: its start was recorded, or its worker says
           -- how long it ran; a reclaim also counts as started after $16 earlier unstarted
           -- reclaims (the row's own count).
           j.started_at IS NOT NULL OR i.ran_for IS NOT NULL
           OR (i.outcome = 'reclaimed' AND j.unstarted_reclaims >= $16::integer) AS started,
           -- Whether this reclaim's crash is blamed on the job: the sweep decides it
           -- (expired_leases, maintenance.sql) when it picks the lease; a requeue blames none.
           i.outcome = 'reclaimed' AND j.started_at IS NOT NULL AND COALESCE(i.blamed, false)
               AS blamed,
           -- Its start was written before the body was called (a job reclaimed unstarted
           -- before): a death between that write and the call looks like a body's.
           j.started_at IS NOT NULL AND j.unstarted_reclaims > 0 AS start_before_body,
           -- The crashes blamed on this job before, in a row (poison count; NULL: not asked).
           -- It walks job_events_job_idx for this one job.
           CASE WHEN i.outcome = 'reclaimed' AND $17::integer > 0 THEN
               (SELECT count(*) FROM {schema}.job_events ev
                WHERE ev.job_id = j.id AND ev.kind = 'reclaim'
                  AND ev.detail ->> 'blamed' = 'true'
                  AND ev.id > COALESCE((SELECT max(rt.id) FROM {schema}.job_events rt
                                        WHERE rt.job_id = j.id
                                          AND (rt.detail ->> 'reason' = 'operator_retry'
                                               OR (rt.kind = 'reclaim'
                                                   AND rt.detail ->> 'started' = 'true'
                                                   AND rt.detail ->> 'blamed' IS DISTINCT
                                                       FROM 'true'))), 0))
           END AS crashes_before
    FROM unnest($1::uuid[], $2::integer[], $3::uuid[], $4::text[], $5::interval[],
                $6::boolean[], $7::text[], $8::interval[], $9::float8[], $10::text[],
                $11::text[], $12::text[], $13::text[], $14::boolean[])
        AS i(id, attempt, worker_id, outcome, delay, consume_budget, result, fallback_ttl,
             ran_for, error_class, error_message, error_traceback, reason, blamed)
    JOIN {schema}.jobs j ON j.id = i.id
    -- IS NOT DISTINCT FROM: the same tests as =, but neither matches an index or a partial
    -- index's predicate, so each row is found by its primary key, never by scanning an
    -- index of running jobs, which keeps an entry for every job claimed since the last
    -- vacuum (thousands under load). See docs/performance.md.
    WHERE j.status IS NOT DISTINCT FROM 'running'
      AND j.locked_by_worker IS NOT DISTINCT FROM i.worker_id AND j.attempt = i.attempt
      AND (i.outcome <> 'abandoned' OR j.cancel_phase = 2)  -- abandon ends a forced cancel
    -- Rows are locked in id order so a flush never deadlocks with another multi-row writer.
    ORDER BY j.id
    FOR UPDATE OF j
),
ruled AS (
    -- The rule that stops a rescheduling: a passed deadline, then a spent attempt budget; or
    -- the one that stops a reclaim: a poison job (NULL crashes_before: never).
    SELECT o.*, k.now,
           (o.retry_kind = 'transient' AND o.attempts_used < o.max_attempts)
           OR (o.retry_kind = 'indefinite'
               AND (o.schedule_to_close IS NULL OR o.schedule_to_close > k.now)) AS retries_left,
           CASE WHEN o.outcome = 'reclaimed' AND o.blamed AND NOT o.cancel
                     AND o.crashes_before + 1 >= $17::integer THEN 'PoisonJob'
                WHEN o.outcome NOT IN ('retry', 'snooze', 'retry_after') OR o.cancel THEN NULL
                WHEN o.schedule_to_close IS NOT NULL
                     AND k.now + o.delay > o.schedule_to_close THEN 'DeadlineExceeded'
                WHEN o.outcome = 'retry_after' AND o.consume_budget
                     AND o.retry_kind = 'transient' AND o.attempts_used >= o.max_attempts
                    THEN 'MaxAttemptsExceeded'
           END AS rule_error
    FROM owned o CROSS JOIN clock k
),
decided AS (
    SELECT r.*,
           CASE
               WHEN r.outcome IN ('succeeded', 'failed', 'cancelled') THEN r.outcome
               -- A body that ignored its forced cancel: an operator's cancel ends the job, a
               -- shutdown's gives it back like a crash.
               WHEN r.outcome = 'abandoned'
                   THEN CASE WHEN r.cancel OR NOT r.retries_left THEN 'abandoned' ELSE 'pending' END
               WHEN r.cancel THEN 'cancelled'
               WHEN r.rule_error IS NOT NULL THEN 'failed'
               WHEN r.outcome IN ('retry', 'snooze', 'retry_after') THEN 'scheduled'
               WHEN r.outcome = 'interrupted' THEN 'pending'
               WHEN NOT r.started THEN 'pending'  -- a give-back of an unstarted body
               WHEN NOT r.retries_left THEN 'crashed'
               WHEN r.outcome = 'released' THEN 'scheduled'
               ELSE 'pending'  -- reclaimed with retries left: due at once
           END AS status,
           -- The attempt spends no budget (uncounted) after a snooze, a retry-after without
           -- budget, a shutdown's interrupt and a give-back of a body that never started.
           CASE WHEN r.outcome IN ('released', 'reclaimed') THEN NOT r.started
                WHEN r.cancel OR r.rule_error IS NOT NULL THEN false
                WHEN r.outcome = 'interrupted' THEN true
                ELSE r.outcome = 'snooze' OR (r.outcome = 'retry_after' AND NOT r.consume_budget)
           END AS uncounted,
           CASE r.rule_error
               WHEN 'MaxAttemptsExceeded'
                   THEN 'all ' || r.max_attempts || ' attempts used; retry-after refused'
               WHEN 'PoisonJob'
                   THEN (r.crashes_before + 1) || ' workers died running it (TASKQ_POISON_RECLAIMS'
                        || ' is ' || $17::integer || '); not handed out again'
               WHEN 'DeadlineExceeded' THEN
                   CASE r.outcome
                       WHEN 'retry' THEN 'retry would start after schedule_to_close '
                                         || '(last error: ' || COALESCE(r.error_message, '') || ')'
                       WHEN 'snooze' THEN 'snooze would start after schedule_to_close'
                       ELSE 'retry-after would start after schedule_to_close'
                   END
           END AS rule_message
    FROM ruled r
),
shaped AS (
    SELECT d.*,
           d.status IN ('succeeded', 'failed', 'cancelled', 'abandoned', 'crashed') AS terminal,
           -- The job's error fields change when the actor failed, a rule failed it, it was
           -- abandoned, or a started attempt was given back or reclaimed.
           d.outcome IN ('failed', 'retry', 'abandoned') OR d.rule_error IS NOT NULL
           OR (d.outcome IN ('released', 'reclaimed') AND d.started) AS sets_error,
           -- An attempt row for every attempt that ran, not for an unstarted give-back nor a
           -- retry-after of a body that never began (a rate limit held the job back).
           CASE WHEN d.outcome IN ('released', 'reclaimed', 'retry_after') THEN d.started
                ELSE true
           END AS ran
    FROM decided d
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = s.status::{schema}.job_status,
        uncounted_attempts = j.uncounted_attempts + CASE WHEN s.uncounted THEN 1 ELSE 0 END,
        -- Pending again after a body ran: due now, at the back; a reclaim blamed on the job a
        -- microsecond ahead of the other bodies its worker died with (protocol/poison.py,
        -- BLAMED_AHEAD). An unstarted give-back and a shutdown's interrupt keep their place.
        scheduled_at = CASE WHEN s.status = 'scheduled' AND s.outcome = 'retry_after'
                                 AND s.reason IS NOT NULL
                                THEN LEAST(to_timestamp(ceil(extract(epoch FROM s.now + s.delay)
                                                             / $19::float8) * $19::float8),
                                           COALESCE(s.schedule_to_close, 'infinity'))
                            WHEN s.status = 'scheduled' THEN s.now + s.delay
                            WHEN s.status = 'pending' AND s.started AND s.blamed
                                THEN s.now - interval '1 microsecond'
                            WHEN s.status = 'pending' AND s.started
                                 AND s.outcome <> 'interrupted' THEN s.now
                            ELSE j.scheduled_at END,
        finished_at = CASE WHEN s.terminal THEN s.now END,
        -- A terminal row keeps its last worker, unless a give-back or reclaim ended it.
        locked_by_worker = CASE WHEN s.terminal AND s.outcome NOT IN ('released', 'reclaimed')
                                THEN j.locked_by_worker END,
        lock_expires_at = NULL,
        -- A job that runs again starts unforced (a shutdown may have escalated this attempt).
        cancel_phase = CASE WHEN s.status = 'cancelled' THEN j.cancel_phase
                            WHEN NOT s.terminal OR s.outcome IN ('released', 'reclaimed')
                                THEN 0
                            ELSE j.cancel_phase END,
        started_at = COALESCE(j.started_at, s.now - make_interval(secs => s.ran_for)),
        -- A reclaim of a body that never started: the next claim carries the count, and the
        -- worker then records the start before the body runs (its crash counts then).
        unstarted_reclaims = CASE WHEN s.outcome = 'reclaimed' AND NOT s.started
                                  THEN j.unstarted_reclaims + 1
                                  ELSE j.unstarted_reclaims END,
        metadata = CASE WHEN s.outcome = 'snooze' AND s.status = 'scheduled'
                        THEN jsonb_set(j.metadata, '{snooze_count}', to_jsonb(
                            COALESCE((j.metadata ->> 'snooze_count')::integer, 0) + 1))
                        ELSE j.metadata END,
        result = CASE WHEN s.status = 'succeeded' THEN s.result::jsonb ELSE j.result END,
        -- The result TTL is re-read from actor_config on every completion: stored TTL, else
        -- the job's own, else the worker's fallback; none -> no expiry.
        result_expires_at = CASE WHEN s.status = 'succeeded' THEN s.now + COALESCE(
                                (SELECT ac.result_ttl FROM {schema}.actor_config ac
                                 WHERE ac.actor = j.actor),
                                j.result_ttl, s.fallback_ttl)
                            ELSE j.result_expires_at END,
        error_class = CASE WHEN s.sets_error THEN COALESCE(s.rule_error, s.error_class)
                           ELSE j.error_class END,
        error_message = CASE WHEN s.sets_error THEN COALESCE(s.rule_message, s.error_message)
                             ELSE j.error_message END,
        error_traceback = CASE WHEN s.sets_error THEN s.error_traceback
                               ELSE j.error_traceback END,
        updated_at = s.now
    FROM shaped s
    WHERE j.id = s.id
    RETURNING j.id, j.status, j.started_at, s.now, s.attempt, s.worker_id, s.outcome,
              s.started, s.ran, s.rule_error, s.rule_message, s.error_class, s.error_message,
              s.error_traceback, s.reason, j.actor, j.queue, s.crashes_before,
              s.started_before, s.blamed, s.start_before_body, j.scheduled_at, j.claimed_at
),
attempts AS (
    INSERT INTO {schema}.job_attempts (
        job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms,
        error_class, error_message, error_traceback
    )
    SELECT m.id, m.attempt, m.worker_id,
           CASE WHEN m.outcome IN ('released', 'reclaimed') THEN 'crashed'
                WHEN m.outcome = 'abandoned' THEN 'abandoned'
                WHEN m.outcome = 'interrupted' AND m.status = 'pending' THEN 'interrupted'
                WHEN m.outcome = 'retry' AND m.status = 'scheduled' THEN 'retried'
                WHEN m.outcome = 'retry' THEN 'failed'  -- a retry refused (cancel, deadline)
                WHEN m.status <> 'scheduled' THEN m.status::text
                WHEN m.outcome = 'snooze' THEN 'snoozed'
                ELSE 'retry_after' END,
           m.started_at, m.now, EXTRACT(EPOCH FROM m.now - m.started_at) * 1000,
           -- The attempt keeps the actor's own error (a reclaim's: the worker crashed); a
           -- snooze or retry-after failed by a rule records the rule's.
           CASE WHEN m.outcome IN ('retry', 'reclaimed') THEN m.error_class
                ELSE COALESCE(m.rule_error, m.error_class) END,
           CASE WHEN m.outcome IN ('retry', 'reclaimed') THEN m.error_message
                ELSE COALESCE(m.rule_message, m.error_message) END,
           m.error_traceback
    FROM moved m
    WHERE m.ran AND m.status <> 'succeeded'  -- a success is read from the job row
      -- A give-back of a body its worker already recorded as lost (record_lost_attempts)
      -- adds no second row for the same attempt.
      AND (m.outcome NOT IN ('released', 'reclaimed')
           OR NOT EXISTS (SELECT 1 FROM {schema}.job_attempts a
                          WHERE a.job_id = m.id AND a.attempt = m.attempt))
),
claims AS (
    -- The claim's event, dated at the claim: a claim writes none (the row holds it while
    -- the attempt runs, and for good when it succeeds); an attempt that ends otherwise
    -- leaves it here, before the row's claimed_at is the next claim's.
    INSERT INTO {schema}.job_events (job_id, occurred_at, kind, from_status, to_status,
                                     worker_id)
    SELECT m.id, COALESCE(m.claimed_at, m.now), 'state_change', 'pending', 'running',
           m.worker_id
    FROM moved m
    WHERE m.status <> 'succeeded'
      -- A claim written when it happened (before this rule) is not written again.
      AND NOT EXISTS ({fragment:stored_claim_of_m})
    ORDER BY m.id
),
events AS (
    -- A reclaim's event is the outbox row `poll_reclaim_events` reads: its occurred_at comes
    -- from the column default, stamped by the same INSERT that draws its id, which keeps ids
    -- and times co-monotonic for the visibility-delay watermark.
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, worker_id, detail)
    SELECT m.id, CASE WHEN m.outcome = 'reclaimed' THEN 'reclaim' ELSE 'state_change' END,
           'running', m.status, m.worker_id,
           CASE m.outcome
               WHEN 'released' THEN jsonb_build_object('reason', m.reason, 'started', m.started)
               WHEN 'interrupted' THEN jsonb_build_object('reason', m.reason)
               WHEN 'abandoned' THEN jsonb_build_object('reason', m.reason)
               WHEN 'retry_after' THEN CASE WHEN m.reason IS NULL THEN '{}'::jsonb
                                            ELSE jsonb_build_object('reason', m.reason) END
               WHEN 'reclaimed' THEN jsonb_build_object(
                   'from_state', 'running', 'to_state', m.status::text,
                   'reason', COALESCE(m.reason, 'lock_expired'),
                   'worker_id', m.worker_id::text, 'started', m.started)
                   || CASE WHEN m.started AND m.started_before IS NULL
                           THEN '{"start_assumed": true}'::jsonb ELSE '{}'::jsonb END
                   || CASE WHEN m.started AND m.reason IS NULL
                           THEN jsonb_build_object('blamed', m.blamed) ELSE '{}'::jsonb END
                   || CASE WHEN m.start_before_body
                           THEN '{"start_before_body": true}'::jsonb ELSE '{}'::jsonb END
                   || CASE WHEN m.rule_error = 'PoisonJob'
                           THEN jsonb_build_object('poison', true,
                                                   'crashes', m.crashes_before + 1)
                           ELSE '{}'::jsonb END
               ELSE '{}'::jsonb  -- the column default: no detail
           END
    FROM moved m
    WHERE m.status <> 'succeeded'  -- a success is read from the job row
    ORDER BY m.id
),
wake AS (
    SELECT pg_notify($15::text, '')
    WHERE EXISTS (
        SELECT 1 FROM moved e
        WHERE e.status = 'pending' OR e.outcome = 'reclaimed' OR {fragment:held_a_capped_slot}
    )
),
announce AS (
    -- One scheduled event (the enqueue's message) for the earliest rescheduled job.
    SELECT pg_notify($18::text, {fragment:scheduled_event})
    FROM (SELECT min(m.scheduled_at) AS scheduled_at
          FROM moved m
          WHERE m.status = 'scheduled'
            AND NOT (m.outcome = 'retry_after' AND m.reason IS NOT NULL)) r
    CROSS JOIN clock k
    WHERE r.scheduled_at IS NOT NULL
)
SELECT m.id, m.status::text AS status, m.rule_error
FROM moved m LEFT JOIN wake ON true LEFT JOIN announce ON true;

-- fragment: worker_lease_fence
-- The fence of a worker's batched success ($1 the worker; `i` an input row with its
-- attempt): the row is still running under that worker's lease, locked in id order (a
-- flush never deadlocks with another multi-row writer). IS NOT DISTINCT FROM: the same tests
-- as =, but neither matches an index or a partial index's predicate, so each row is found
-- by its primary key, never by scanning an index of running jobs, which keeps an entry for
-- every job claimed since the last vacuum (thousands under load).
WHERE j.status IS NOT DISTINCT FROM 'running'
  AND j.locked_by_worker IS NOT DISTINCT FROM $1::uuid AND j.attempt = i.attempt
ORDER BY j.id
FOR UPDATE OF j

-- name: settle_succeeded
-- The hot path: `settle` for a batch whose every outcome is succeeded, kept as its own
-- statement because the general one measured slower on it (docs/performance.md, "What
-- each lever gained"). It is settle's success branch written out: the
-- same fence, lock order, row write (no attempt or event row) and wake, and
-- tests/postgres/test_settle.py holds the two copies together (same rows, attempts and
-- events from one snapshot). Change one, change both.
-- $1 worker, $2 ids, $3 attempts, $4 results (JSON text, encoded once by the worker),
-- $5 fallback TTLs, $6 seconds each body ran (parallel arrays), $7 the wake channel.
-- Returns the ids settled.
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
    {fragment:worker_lease_fence}
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
    RETURNING j.id, j.actor, j.queue
),
wake AS (
    SELECT pg_notify($7::text, '')
    WHERE EXISTS (
        SELECT 1 FROM done e WHERE {fragment:held_a_capped_slot}
    )
)
SELECT d.id FROM done d LEFT JOIN wake ON true;

-- name: settle_denied
-- `settle` for a batch of rate-limit denials (a retry-after that spends no budget, of a body
-- that never began, naming the limit), kept as its own statement because the general one
-- costs a denial several times more, and a limit's backlog is denied by the thousand. It is
-- settle's branch written out for the rows it covers: the same fence and lock order, the row
-- back to scheduled at now + delay on the DENIAL_GRID (as settle rounds a denial) with the
-- attempt uncounted, the claim's event when it was
-- not stored, the denial's event naming the limit, no attempt row, the wake of capped
-- actors and queues, no announcement. A row it does not cover (a cancel was requested, the
-- delay passes schedule_to_close, a start is on the row) is locked and left as it is:
-- returned with `covered` false, for `settle` to write. tests/postgres/test_settle.py holds
-- the two copies together. Change one, change both.
-- $1 worker, $2 ids, $3 attempts, $4 delays, $5 reasons (parallel arrays), $6 the wake
-- channel, $7 DENIAL_GRID in seconds. Returns each row whose lease it was, and whether it was
-- written here.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
owned AS (
    SELECT j.id, i.delay, i.reason, j.claimed_at,
           j.cancel_requested_at IS NULL AND j.started_at IS NULL
           AND (j.schedule_to_close IS NULL OR k.now + i.delay <= j.schedule_to_close)
               AS covered
    FROM unnest($2::uuid[], $3::integer[], $4::interval[], $5::text[])
        AS i(id, attempt, delay, reason)
    CROSS JOIN clock k
    JOIN {schema}.jobs j ON j.id = i.id
    {fragment:worker_lease_fence}
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = 'scheduled', uncounted_attempts = j.uncounted_attempts + 1,
        -- On the DENIAL_GRID ($7 seconds) as in settle.
        scheduled_at = LEAST(to_timestamp(ceil(extract(epoch FROM k.now + o.delay) / $7::float8)
                                          * $7::float8),
                             COALESCE(j.schedule_to_close, 'infinity')),
        finished_at = NULL, locked_by_worker = NULL,
        lock_expires_at = NULL, cancel_phase = 0, updated_at = k.now
    FROM owned o, clock k
    WHERE j.id = o.id AND o.covered
    RETURNING j.id, j.actor, j.queue, j.claimed_at, o.reason, k.now
),
claims AS (
    -- As settle's: the claim's event, dated at the claim, unless it was stored then.
    INSERT INTO {schema}.job_events (job_id, occurred_at, kind, from_status, to_status,
                                     worker_id)
    SELECT m.id, COALESCE(m.claimed_at, m.now), 'state_change', 'pending', 'running', $1::uuid
    FROM moved m
    WHERE NOT EXISTS ({fragment:stored_claim_of_m})
    ORDER BY m.id
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, worker_id, detail)
    SELECT m.id, 'state_change', 'running', 'scheduled', $1::uuid,
           jsonb_build_object('reason', m.reason)
    FROM moved m
    ORDER BY m.id
),
wake AS (
    SELECT pg_notify($6::text, '')
    WHERE EXISTS (SELECT 1 FROM moved e WHERE {fragment:held_a_capped_slot})
)
SELECT o.id, o.covered FROM owned o LEFT JOIN wake ON true;

-- name: delete_succeeded
-- `settle_succeeded` for an ephemeral actor's successes: the rows are deleted, their events
-- and attempts with them (ON DELETE CASCADE), instead of kept as succeeded. The same fence
-- and lock order ($1 worker, $2 ids, $3 attempts: a lease lost meanwhile deletes nothing)
-- and the same wake for capped actors and queues ($4 the wake channel). Returns the ids.
WITH owned AS (
    SELECT j.id
    FROM unnest($2::uuid[], $3::integer[]) AS i(id, attempt)
    JOIN {schema}.jobs j ON j.id = i.id
    {fragment:worker_lease_fence}
),
gone AS (
    DELETE FROM {schema}.jobs j
    USING owned o
    WHERE j.id = o.id
    RETURNING j.id, j.actor, j.queue
),
wake AS (
    SELECT pg_notify($4::text, '')
    WHERE EXISTS (
        SELECT 1 FROM gone e WHERE {fragment:held_a_capped_slot}
    )
)
SELECT g.id FROM gone g LEFT JOIN wake ON true;
