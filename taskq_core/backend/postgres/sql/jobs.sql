-- Jobs: enqueue (one statement, or COPY bracketed by copy_clock and copy_wake), operator
-- cancel and retry, and the reads the client and CLI need. Claims are in dispatch.sql, lease
-- upkeep in leases.sql, and every outcome of a claimed attempt in settle.sql.
--
-- Every status change writes its job_events row in the SAME statement through
-- data-modifying CTEs: one round trip, one atomic write. Bulk operator writes lock their rows
-- in id order, so concurrent bulk writers cannot deadlock.
-- Time always comes from clock_timestamp() here, never from the application.

-- fragment: job_as_text
-- Every column of a job row `r` as a JobRow reads it, JSON as text (any connection's codecs).
r.id, r.actor, r.queue, r.payload::text AS payload, r.status, r.priority, r.scheduled_at,
       r.created_at, r.retry_kind, r.max_attempts, r.attempt, r.locked_by_worker,
       r.lock_expires_at, r.claimed_at, r.started_at, r.finished_at, r.cancel_phase,
       r.cancel_requested_at, r.cancel_reason, r.identity_key, r.fairness_key,
       r.schedule_to_close, r.result::text AS result, r.result_ttl, r.result_expires_at,
       r.error_class, r.error_message, r.error_traceback, r.metadata::text AS metadata,
       r.trace_id, r.span_id, r.progress_seq, r.progress_state::text AS progress_state,
       r.updated_at, r.unique_key, r.unique_until, r.unstarted_reclaims, r.uncounted_attempts

-- name: enqueue
-- One job, one row back; notes under the insert (kept short above it, so pg_stat_activity's
-- 1 kB of the statement shows the INSERT).
WITH clock AS (
    SELECT clock_timestamp() AS now
),
unique_key AS (
    SELECT CASE WHEN $18::interval IS NULL THEN $17::text
                ELSE $17::text || '@' || to_char(to_timestamp(w.e) AT TIME ZONE 'UTC',
                    CASE WHEN w.e = floor(w.e) THEN 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"'
                         ELSE 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"' END)
           END AS key,
           to_timestamp(w.e) + $18::interval AS until
    FROM clock k, LATERAL (
        SELECT floor(extract(epoch FROM k.now) / extract(epoch FROM $18::interval))
               * extract(epoch FROM $18::interval) AS e
    ) w
),
inserted AS (
    INSERT INTO {schema}.jobs (
        id, actor, queue, payload, status, priority, scheduled_at, created_at, updated_at,
        identity_key, fairness_key, schedule_to_close, retry_kind, max_attempts, result_ttl,
        metadata, trace_id, span_id, unique_key, unique_until
    )
    SELECT $1::uuid, $2::text, $3::text, $4::text::jsonb,
           (CASE WHEN s.start > k.now THEN 'scheduled' ELSE 'pending' END)::{schema}.job_status,
           $5::integer,
           greatest(s.start, k.now),
           k.now, k.now, $7::text, $8::text, k.now + $9::interval, $10::text, $11::integer,
           $12::interval, $13::text::jsonb, $14::text, $15::text, u.key, u.until
    FROM clock k CROSS JOIN unique_key u
    CROSS JOIN LATERAL (
        SELECT coalesce($19::timestamptz, k.now + greatest($6::interval, interval '0')) AS start
    ) s
    ON CONFLICT DO NOTHING
    RETURNING *
),
-- JSON travels as text both ways ($4 payload, $13 metadata): any asyncpg connection works,
-- whatever its jsonb codec. $6 delay, $9 schedule_to_close, $12 result_ttl, $18 unique_for:
-- intervals; $19 run_at, the absolute start (timestamptz; the client never sends both). $16 is the wake channel, notified only when the job is dispatchable now (the
-- NOTIFY is delivered when the transaction commits). $17 unique_key: stored as given
-- without $18 (held while the job waits or runs); with $18, as unique.windowed_key writes
-- it with the start of the window of now ($18 long, aligned on the Unix epoch), held until
-- the window's end (`until`) whatever the job's state. A conformance test holds the two
-- texts together.
woken AS (
    SELECT pg_notify($16::text, '') FROM inserted WHERE status = 'pending'
),
-- A job that waits for a time is announced on the events channel ($20) with how long until
-- it is due: the leader's promotion wakes for it on time (worker/sweeps/promotion.py).
announced AS (
    SELECT pg_notify($20::text, {fragment:scheduled_event}) FROM inserted r CROSS JOIN clock k
    WHERE r.status = 'scheduled'
),
-- Idempotent on the id ($1): when a job with that id exists (a retried enqueue whose first
-- attempt committed but whose answer was lost) nothing is inserted or notified and that job
-- comes back with created = false. Otherwise a job holding the unique key refuses the insert
-- (ON CONFLICT: the unique index decides, no read-then-insert race) and comes back as
-- holder_id / holder_until, with the clock's now for the caller's retry hint. Both are read
-- in the statement's snapshot, so a conflicting insert that committed while this one waited
-- on it shows neither (the job's columns are NULL): the caller runs the statement again.
found AS (
    SELECT inserted.*, true AS created FROM inserted
    UNION ALL
    SELECT j.*, false AS created FROM {schema}.jobs j
    WHERE j.id = $1::uuid AND NOT EXISTS (SELECT 1 FROM inserted)
),
holder AS (
    -- The unique index's predicate: who holds the key now.
    SELECT j.id, j.unique_until
    FROM {schema}.jobs j
    JOIN unique_key u ON j.unique_key = u.key
    WHERE (j.unique_until IS NOT NULL OR j.status IN ('waiting', 'pending', 'scheduled', 'running'))
      AND NOT EXISTS (SELECT 1 FROM inserted)
    LIMIT 1
)
SELECT {fragment:job_as_text}, r.created,
       (SELECT count(*) FROM woken) AS woken, (SELECT count(*) FROM announced) AS announced,
       h.id AS holder_id, h.unique_until AS holder_until, k.now
FROM clock k
LEFT JOIN found r ON true
LEFT JOIN holder h ON true;

-- name: copy_clock
-- Opens a bulk enqueue (enqueue_batch, enqueue_batch_fast: one COPY in one transaction): the
-- database clock, read once, so delays and deadlines resolve on the arbiter's time.
SELECT clock_timestamp() AS now;

-- name: copy_wake
-- Closes a bulk enqueue with a job dispatchable now: the one wake NOTIFY on channel $1 (COPY
-- cannot notify by itself), delivered only if the COPY's transaction commits.
SELECT pg_notify($1::text, '');

-- name: copy_announce
-- Closes a bulk enqueue with a job that waits for a time: one scheduled event on the events
-- channel $1 for the earliest of them, due in $2 seconds (as `enqueue` announces one).
SELECT pg_notify($1::text, json_build_object('type', 'scheduled', 'in', $2::float8)::text);

-- fragment: scheduled_event
-- The events channel's message for a job `r` that waits until r.scheduled_at (clock `k`).
json_build_object('type', 'scheduled', 'in', extract(epoch FROM r.scheduled_at - k.now))::text

-- name: replace_waiting_job
-- Debounce (JobsClient.enqueue on_conflict="replace"): job $1, while waiting, takes the
-- payload $2 and the start ($3 delay or $4 run_at, as the enqueue statement resolves them)
-- of a new enqueue; one `replaced` event; the wake NOTIFY ($5) when it is pending after, the
-- scheduled event ($6) when it waits.
-- A job claimed meanwhile fails the status test on its new version: no row.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
old AS (
    SELECT j.id, j.status FROM {schema}.jobs j
    WHERE j.id = $1::uuid AND j.status IN ('pending', 'scheduled')
    FOR UPDATE
),
replaced AS (
    UPDATE {schema}.jobs j
    SET payload = $2::text::jsonb,
        status = (CASE WHEN s.start > k.now THEN 'scheduled' ELSE 'pending' END)
            ::{schema}.job_status,
        scheduled_at = greatest(s.start, k.now), updated_at = k.now
    FROM old o, clock k, LATERAL (
        SELECT coalesce($4::timestamptz, k.now + greatest($3::interval, interval '0')) AS start
    ) s
    WHERE j.id = o.id
    RETURNING j.*, o.status AS from_status
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status)
    SELECT r.id, 'replaced', r.from_status, r.status FROM replaced r
),
woken AS (
    SELECT pg_notify($5::text, '') FROM replaced WHERE status = 'pending'
),
announced AS (
    SELECT pg_notify($6::text, {fragment:scheduled_event}) FROM replaced r CROSS JOIN clock k
    WHERE r.status = 'scheduled'
)
SELECT {fragment:job_as_text}, (SELECT count(*) FROM woken) AS woken,
       (SELECT count(*) FROM announced) AS announced
FROM replaced r;

-- name: unique_holder
-- Which job holds one of the unique keys $1 (as stored) now, with the clock for the retry
-- hint: read after a bulk enqueue the unique index refused, to name the holder.
SELECT j.unique_key, j.id, j.unique_until, clock_timestamp() AS now
FROM {schema}.jobs j
WHERE j.unique_key = ANY ($1::text[])
  AND (j.unique_until IS NOT NULL OR j.status IN ('waiting', 'pending', 'scheduled', 'running'))
LIMIT 1;

-- name: cancel_where
-- Cancel the newest $5 non-terminal jobs matching the filter ($1 statuses or NULL, $2 queue,
-- $3 actor, $4 ids), locked in id order so concurrent bulk writers cannot deadlock:
-- pending/scheduled -> cancelled at once; running -> cancel_phase 1 and a NOTIFY on the
-- events channel ($7) for the worker that holds it. A single-job cancel is this with $4.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
-- Mirrors retry_jobs' matched on purpose: same filter and newest-first cap over the other statuses.
matched AS (
    SELECT j.id
    FROM {schema}.jobs j
    WHERE j.status IN ('waiting', 'pending', 'scheduled', 'running')
      AND {fragment:job_filter}
    ORDER BY j.created_at DESC, j.id DESC
    LIMIT $5::bigint
),
target AS (
    SELECT j.id, j.status, j.cancel_requested_at
    FROM {schema}.jobs j
    JOIN matched m ON m.id = j.id
    WHERE j.status IN ('waiting', 'pending', 'scheduled', 'running')
    ORDER BY j.id
    FOR UPDATE OF j
),
cancelled AS (
    UPDATE {schema}.jobs j
    SET status = 'cancelled', cancel_requested_at = k.now, cancel_reason = $6::text,
        finished_at = k.now, updated_at = k.now
    FROM target t CROSS JOIN clock k
    WHERE j.id = t.id AND t.status IN ('waiting', 'pending', 'scheduled')
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

-- name: retry_jobs
-- Operator retry of the newest $5 failed/crashed/cancelled jobs matching the filter (as in
-- `cancel_where`): back to pending with a fresh attempt budget and a clean slate. One NOTIFY.
-- Its attempt number stays (the next body's is higher): every attempt so far is uncounted.
-- A job whose unique key (one without a window: held while waiting or running) another job
-- holds now stays as it is, and of matched jobs sharing such a key only the newest goes back.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
-- Mirrors cancel_where's matched on purpose; it also carries the unique-key columns `picked` needs.
matched AS (
    SELECT j.id, j.status, j.unique_key, j.unique_until, j.created_at
    FROM {schema}.jobs j
    WHERE j.status IN ('failed', 'crashed', 'cancelled')
      AND {fragment:job_filter}
    ORDER BY j.created_at DESC, j.id DESC
    LIMIT $5::bigint
),
picked AS (
    SELECT DISTINCT ON (w.key) w.id, w.status
    FROM (
        SELECT m.*, CASE WHEN m.unique_key IS NOT NULL AND m.unique_until IS NULL
                         THEN 'key:' || m.unique_key ELSE m.id::text END AS key
        FROM matched m
    ) w
    WHERE w.key = w.id::text OR NOT EXISTS (
        SELECT 1 FROM {schema}.jobs o
        WHERE o.unique_key = w.unique_key AND o.status IN ('waiting', 'pending', 'scheduled', 'running')
    )
    ORDER BY w.key, w.created_at DESC, w.id DESC
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = 'pending', uncounted_attempts = j.attempt, scheduled_at = k.now,
        started_at = NULL, finished_at = NULL, result = NULL, result_expires_at = NULL,
        locked_by_worker = NULL,
        lock_expires_at = NULL, cancel_phase = 0, cancel_requested_at = NULL,
        cancel_reason = NULL, error_class = NULL, error_message = NULL,
        error_traceback = NULL, updated_at = k.now
    FROM picked m CROSS JOIN clock k
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

-- fragment: job_filter
-- A JobFilter's match on a job `j` (rows.filter_args): $1 statuses (NULL: any; empty:
-- none), $2 queue, $3 actor, $4 ids. list_jobs, count_jobs and the bulk writes share it.
($1::text[] IS NULL OR j.status = ANY ($1::text[]::{schema}.job_status[]))
  AND ($2::text IS NULL OR j.queue = $2::text)
  AND ($3::text IS NULL OR j.actor = $3::text)
  AND ($4::uuid[] IS NULL OR j.id = ANY ($4::uuid[]))

-- name: list_jobs
-- $1 statuses (NULL: any; empty: none), $2 queue, $3 actor, $4 ids, $5 limit (NULL: all).
SELECT *
FROM {schema}.jobs j
WHERE {fragment:job_filter}
ORDER BY j.created_at DESC, j.id DESC
LIMIT $5::bigint;

-- name: get_attempts
-- The job's attempt rows, then its success's attempt read from the job row (id 0), as
-- protocol.history.with_success_attempt derives it: a success writes no row (settle.sql). A
-- job that succeeded before that has its stored row instead.
SELECT id, job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms,
       error_class, error_message, error_traceback
FROM (
    SELECT {fragment:attempt_columns}, false AS from_row
    FROM {schema}.job_attempts a WHERE a.job_id = $1::uuid
    UNION ALL
    SELECT {fragment:success_attempt}, true
    FROM {schema}.jobs j
    WHERE j.id = $1::uuid AND j.status = 'succeeded'
      AND NOT EXISTS (SELECT 1 FROM {schema}.job_attempts a
                      WHERE a.job_id = j.id AND a.outcome = 'succeeded')
) x
ORDER BY from_row, id;

-- name: get_events
-- The job's events in time order: the stored ones; the claim of its current attempt while
-- it runs or once it succeeded (a claim is written only when its attempt ends otherwise:
-- settle.sql), read from the row; its success's event, read from the row (as get_attempts
-- reads its success's attempt). Both read rows have id 0, as protocol.history derives them;
-- a job claimed or succeeded before these rules has its stored rows instead.
SELECT id, job_id, occurred_at, kind, from_status, to_status, worker_id, detail
FROM (
    SELECT e.id, e.job_id, e.occurred_at, e.kind, e.from_status, e.to_status, e.worker_id,
           e.detail
    FROM {schema}.job_events e WHERE e.job_id = $1::uuid
    UNION ALL
    SELECT 0, m.id, m.claimed_at, 'state_change', 'pending', 'running', m.locked_by_worker,
           '{}'::jsonb
    FROM {schema}.jobs m
    WHERE m.id = $1::uuid AND m.status IN ('running', 'succeeded') AND m.claimed_at IS NOT NULL
      AND NOT EXISTS ({fragment:stored_claim_of_m})
    UNION ALL
    SELECT 0, j.id, j.finished_at, 'state_change', 'running', 'succeeded', j.locked_by_worker,
           '{}'::jsonb
    FROM {schema}.jobs j
    WHERE j.id = $1::uuid AND j.status = 'succeeded'
      AND NOT EXISTS (SELECT 1 FROM {schema}.job_events e
                      WHERE e.job_id = j.id AND e.to_status = 'succeeded')
) x
ORDER BY occurred_at, id;

-- fragment: stored_claim_of_m
-- The stored event of the current claim of the job `m` (its claimed_at): written by the
-- settle at the claim's time, or at the claim itself (at or after it) before that rule.
SELECT 1 FROM {schema}.job_events e
WHERE e.job_id = m.id AND e.from_status = 'pending' AND e.to_status = 'running'
  AND e.occurred_at >= m.claimed_at

-- fragment: attempt_columns
-- An attempt row `a` (job_attempts or job_attempts_archive), column by column.
a.id, a.job_id, a.attempt, a.worker_id, a.outcome, a.started_at, a.finished_at, a.duration_ms,
a.error_class, a.error_message, a.error_traceback

-- fragment: success_attempt
-- The attempt row of the success of the job `j` (a jobs or jobs_archive row), id 0.
0::bigint, j.id, j.attempt, j.locked_by_worker, 'succeeded', j.started_at, j.finished_at,
EXTRACT(EPOCH FROM j.finished_at - j.started_at)::float8 * 1000, NULL::text, NULL::text,
NULL::text

-- name: count_by_queue_status
SELECT queue, status, count(*) AS count
FROM {schema}.jobs
GROUP BY queue, status
ORDER BY queue, status;

-- name: has_active_jobs
-- The drain monitor's question, answered by the first index entry found, not a count. The
-- pending side walks each queue's head in jobs_fair_dispatch_idx's order: as a plain EXISTS,
-- statistics taken while the backlog was all pending (a drain's start) made it a
-- sequential scan that stepped over every job done since, on every call.
SELECT EXISTS (SELECT 1
               FROM unnest($1::text[]) AS q(name)
               CROSS JOIN LATERAL (
                   SELECT 1 FROM {schema}.jobs j
                   WHERE j.status = 'pending' AND j.queue = q.name
                   ORDER BY j.queue, COALESCE(j.fairness_key, '__null__'), j.priority DESC,
                            j.scheduled_at, j.id
                   LIMIT 1
               ) head)
    OR EXISTS (SELECT 1 FROM {schema}.jobs
               WHERE status IN ('scheduled', 'running', 'waiting') AND queue = ANY ($1::text[]));

-- name: count_pending_jobs
SELECT actor, count(*) AS count
FROM {schema}.jobs
WHERE status IN ('pending', 'scheduled') AND actor = ANY ($1::text[])
GROUP BY actor
ORDER BY actor;
