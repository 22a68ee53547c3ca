-- Admin: queues, operator-owned actor capacity, worker registrations: what the CLI, the
-- TUI and worker start-up read and write. None of it is on the per-job hot path.

-- name: list_queues
-- Every queue that has jobs or a row ($1: just that one, or NULL for all), with its
-- settings (defaults when it has no row), its non-zero status counts in enum order and how
-- many of its running jobs are claimed, their bodies not started.
WITH counts AS (
    SELECT j.queue, j.status, count(*) AS n,
           count(*) FILTER (WHERE j.status = 'running' AND j.started_at IS NULL) AS claimed
    FROM {schema}.jobs j
    WHERE $1::text IS NULL OR j.queue = $1::text
    GROUP BY j.queue, j.status
),
per_queue AS (
    SELECT c.queue, array_agg(c.status::text ORDER BY c.status) AS statuses,
           array_agg(c.n ORDER BY c.status) AS counts, sum(c.claimed)::bigint AS claimed
    FROM counts c
    GROUP BY c.queue
),
settings AS (
    SELECT q.* FROM {schema}.queues q WHERE $1::text IS NULL OR q.name = $1::text
)
SELECT COALESCE(s.name, p.queue) AS name, COALESCE(s.mode, 'strict_fifo') AS mode,
       s.max_concurrent, COALESCE(s.paused, false) AS paused, s.name IS NOT NULL AS has_row,
       s.paused_at, s.paused_by, s.pause_reason,
       COALESCE(p.statuses, '{}') AS statuses, COALESCE(p.counts, '{}') AS counts,
       COALESCE(p.claimed, 0) AS claimed
FROM settings s
FULL JOIN per_queue p ON p.queue = s.name
ORDER BY 1;

-- name: update_queue
-- Upsert a queue row. Each field has a "set" flag ($2 mode, $4 max_concurrent, $6 paused);
-- an unset field keeps its value (or the default on insert). A pause ($6 and $7) records
-- its note: now, $9 who, $10 why; a resume clears it. Wakes the workers ($8): a resumed
-- queue or a raised cap can make waiting jobs dispatchable.
WITH upserted AS (
    INSERT INTO {schema}.queues AS q (
        name, mode, max_concurrent, paused, paused_at, paused_by, pause_reason, updated_at
    )
    VALUES ($1::text,
            CASE WHEN $2::boolean THEN $3::text ELSE 'strict_fifo' END,
            CASE WHEN $4::boolean THEN $5::integer END,
            CASE WHEN $6::boolean THEN $7::boolean ELSE false END,
            CASE WHEN $6::boolean AND $7::boolean THEN clock_timestamp() END,
            CASE WHEN $6::boolean AND $7::boolean THEN $9::text END,
            CASE WHEN $6::boolean AND $7::boolean THEN $10::text END,
            clock_timestamp())
    ON CONFLICT (name) DO UPDATE
    SET mode = CASE WHEN $2::boolean THEN EXCLUDED.mode ELSE q.mode END,
        max_concurrent = CASE WHEN $4::boolean THEN EXCLUDED.max_concurrent
                              ELSE q.max_concurrent END,
        paused = CASE WHEN $6::boolean THEN EXCLUDED.paused ELSE q.paused END,
        paused_at = CASE WHEN $6::boolean THEN EXCLUDED.paused_at ELSE q.paused_at END,
        paused_by = CASE WHEN $6::boolean THEN EXCLUDED.paused_by ELSE q.paused_by END,
        pause_reason = CASE WHEN $6::boolean THEN EXCLUDED.pause_reason
                            ELSE q.pause_reason END,
        updated_at = EXCLUDED.updated_at
    RETURNING q.*
),
counts AS (
    SELECT j.status, count(*) AS n,
           count(*) FILTER (WHERE j.status = 'running' AND j.started_at IS NULL) AS claimed
    FROM {schema}.jobs j
    WHERE j.queue = $1::text
    GROUP BY j.status
),
woken AS (
    SELECT pg_notify($8::text, '')
)
SELECT u.name, u.mode, u.max_concurrent, u.paused, true AS has_row,
       u.paused_at, u.paused_by, u.pause_reason,
       COALESCE((SELECT array_agg(c.status::text ORDER BY c.status) FROM counts c), '{}')
           AS statuses,
       COALESCE((SELECT array_agg(c.n ORDER BY c.status) FROM counts c), '{}') AS counts,
       (SELECT COALESCE(sum(c.claimed), 0)::bigint FROM counts c) AS claimed,
       (SELECT count(*) FROM woken) AS woken
FROM upserted u;

-- name: sync_actor_configs
-- Worker start-up: create the missing actor_config rows from the code ($1..$6 and $8..$11,
-- one array per column, JSON metadata as text) and return every declared actor with its
-- stored row as it was before this statement, locked, so the caller can report capacity
-- overrides and structural drift. With $7 (force) drifted queue/metadata are overwritten.
-- Capacity is never written back: it is operator-owned once the row exists. The retry
-- policy and priority ($8..$11) are the code's: written to every existing row, unless
-- structural drift refuses this start (no $7 and some declared actor drifted), so a refused
-- worker leaves the running fleet's policy as it was.
WITH declared AS (
    SELECT d.actor, d.queue, d.metadata::jsonb AS metadata, d.max_concurrent, d.max_pending,
           d.result_ttl, d.retry_kind, d.max_attempts, d.retry_time_budget, d.priority, d.ord
    FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::integer[],
                $6::interval[], $8::text[], $9::integer[], $10::interval[], $11::integer[])
         WITH ORDINALITY AS d(actor, queue, metadata, max_concurrent, max_pending, result_ttl,
                              retry_kind, max_attempts, retry_time_budget, priority, ord)
),
stored AS (
    SELECT ac.*
    FROM {schema}.actor_config ac
    WHERE ac.actor = ANY ($1::text[])
    ORDER BY ac.actor
    FOR UPDATE
),
drifted AS (
    SELECT EXISTS (
        SELECT 1 FROM declared d JOIN stored s ON s.actor = d.actor
        WHERE s.queue <> d.queue OR s.metadata <> d.metadata
    ) AS found
),
created AS (
    INSERT INTO {schema}.actor_config (
        actor, queue, metadata, max_concurrent, max_pending, result_ttl,
        retry_kind, max_attempts, retry_time_budget, priority
    )
    SELECT d.actor, d.queue, d.metadata, d.max_concurrent, d.max_pending, d.result_ttl,
           d.retry_kind, d.max_attempts, d.retry_time_budget, d.priority
    FROM declared d
    WHERE NOT EXISTS (SELECT 1 FROM stored s WHERE s.actor = d.actor)
    ORDER BY d.ord
    ON CONFLICT (actor) DO NOTHING
    RETURNING actor
),
updated AS (
    UPDATE {schema}.actor_config ac
    SET queue = CASE WHEN $7::boolean THEN d.queue ELSE ac.queue END,
        metadata = CASE WHEN $7::boolean THEN d.metadata ELSE ac.metadata END,
        retry_kind = d.retry_kind, max_attempts = d.max_attempts,
        retry_time_budget = d.retry_time_budget, priority = d.priority,
        updated_at = clock_timestamp()
    FROM declared d
    WHERE ac.actor = d.actor
      AND ($7::boolean OR NOT (SELECT found FROM drifted))
      AND (ac.queue IS DISTINCT FROM CASE WHEN $7::boolean THEN d.queue ELSE ac.queue END
           OR ac.metadata IS DISTINCT FROM CASE WHEN $7::boolean THEN d.metadata
                                                ELSE ac.metadata END
           OR ac.retry_kind IS DISTINCT FROM d.retry_kind
           OR ac.max_attempts IS DISTINCT FROM d.max_attempts
           OR ac.retry_time_budget IS DISTINCT FROM d.retry_time_budget
           OR ac.priority IS DISTINCT FROM d.priority)
    RETURNING ac.actor
)
SELECT d.actor, c.actor IS NOT NULL AS created, s.actor IS NOT NULL AS existed,
       s.queue AS stored_queue, s.metadata AS stored_metadata,
       s.max_concurrent AS stored_max_concurrent, s.max_pending AS stored_max_pending,
       s.result_ttl AS stored_result_ttl,
       (SELECT count(*) FROM updated) AS updated
FROM declared d
LEFT JOIN created c ON c.actor = d.actor
LEFT JOIN stored s ON s.actor = d.actor
ORDER BY d.ord;

-- name: list_actor_configs
SELECT * FROM {schema}.actor_config ORDER BY actor;

-- name: get_actor_config
SELECT * FROM {schema}.actor_config WHERE actor = $1::text;

-- name: update_actor_config
-- Set or clear capacity fields; each has a "set" flag ($2, $4, $6). Dispatch and completion
-- re-read these every time, so the change is live at once; wake the workers ($8) in case a
-- raised cap frees capacity.
WITH updated AS (
    UPDATE {schema}.actor_config
    SET max_concurrent = CASE WHEN $2::boolean THEN $3::integer ELSE max_concurrent END,
        max_pending = CASE WHEN $4::boolean THEN $5::integer ELSE max_pending END,
        result_ttl = CASE WHEN $6::boolean THEN $7::interval ELSE result_ttl END,
        updated_at = clock_timestamp()
    WHERE actor = $1::text
    RETURNING *
),
woken AS (
    SELECT pg_notify($8::text, '') WHERE EXISTS (SELECT 1 FROM updated)
)
SELECT u.*, (SELECT count(*) FROM woken) AS woken FROM updated u;

-- name: get_actor_max_pending
SELECT actor, max_pending FROM {schema}.actor_config ORDER BY actor;

-- name: register_worker
-- Insert or refresh a worker row (a restarted id keeps its first started_at).
INSERT INTO {schema}.workers AS w (
    id, hostname, pid, worker_label, workgroup_instance, queues, actors, concurrency, version,
    started_at, last_seen_at, stopped_at, status
)
SELECT $1::uuid, $2::text, $3::integer, $4::text, $5::text, $6::text[], $7::text[],
       $8::integer, $9::text, k.now, k.now, NULL, 'running'
FROM (SELECT clock_timestamp() AS now) k
ON CONFLICT (id) DO UPDATE
SET hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, worker_label = EXCLUDED.worker_label,
    workgroup_instance = EXCLUDED.workgroup_instance, queues = EXCLUDED.queues,
    actors = EXCLUDED.actors, concurrency = EXCLUDED.concurrency, version = EXCLUDED.version,
    last_seen_at = EXCLUDED.last_seen_at, stopped_at = NULL, status = 'running';

-- name: mark_worker_stopped
UPDATE {schema}.workers
SET status = 'stopped', stopped_at = clock_timestamp()
WHERE id = $1::uuid;

-- name: mark_worker_exited
-- The supervisor saw worker $1's process end: stopped (at once, or when the worker marked
-- itself stopped) with exit status $2 or signal $3.
UPDATE {schema}.workers
SET status = 'stopped', stopped_at = COALESCE(stopped_at, clock_timestamp()),
    exit_code = $2::integer, exit_signal = $3::text
WHERE id = $1::uuid
RETURNING id;

-- name: mark_worker_acknowledged
-- An operator ($3, why $4, detail $5) acknowledges the silence of worker $1 last seen at $2:
-- only while it is running and still last seen then; the operator log entry commits with it.
WITH k AS (
    SELECT clock_timestamp() AS now
),
acked AS (
    UPDATE {schema}.workers w
    SET acknowledged_at = k.now, acknowledged_by = $3::text
    FROM k
    WHERE w.id = $1::uuid AND w.status = 'running' AND w.last_seen_at = $2::timestamptz
    RETURNING w.id, k.now
),
logged AS (
    INSERT INTO {schema}.operator_log (occurred_at, action, target, by_operator, reason, detail)
    SELECT a.now, 'worker_ack', a.id::text, $3::text, $4::text, $5::text::jsonb
    FROM acked a
)
SELECT count(*) AS acknowledged FROM acked;

-- name: read_staleness
-- How far behind its primary the server answering is (no row's worth of cost): on a primary
-- standby is false; on a standby, behind is 0 while everything received is replayed, else
-- the age of the last change replayed. pg_stat_wal_receiver shows its status to roles with
-- pg_read_all_stats and only its pid to others (a receiver then counts as streaming).
SELECT pg_is_in_recovery() AS standby,
       EXISTS (SELECT 1 FROM pg_stat_wal_receiver
               WHERE COALESCE(status, 'streaming') = 'streaming') AS streaming,
       pg_last_xact_replay_timestamp() AS last_replayed_at,
       CASE WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
            ELSE extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())
       END::float8 AS behind;

-- name: list_workers
-- Every worker, most recently seen first, with leadership (from the leader row) and its
-- running jobs counted (bodies running, and claimed ahead of a consumer).
SELECT w.*, l.worker_id IS NOT NULL AS is_leader, COALESCE(r.running, 0) AS running_jobs,
       COALESCE(r.claimed, 0) AS claimed_jobs
FROM {schema}.workers w
LEFT JOIN {schema}.maintenance_leader l ON l.name = 'maintenance' AND l.worker_id = w.id
LEFT JOIN (
    SELECT j.locked_by_worker, count(j.started_at) AS running,
           count(*) - count(j.started_at) AS claimed
    FROM {schema}.jobs j
    WHERE j.status = 'running'
    GROUP BY j.locked_by_worker
) r ON r.locked_by_worker = w.id
ORDER BY w.last_seen_at DESC, w.id DESC;

-- name: count_jobs
-- How many jobs the filter matches (as `list_jobs`: $1 statuses or NULL, $2 queue,
-- $3 actor, $4 ids), at most $5 when it is not NULL. Bulk operations preview with it.
SELECT count(*) AS count
FROM (
    SELECT 1
    FROM {schema}.jobs j
    WHERE {fragment:job_filter}
    LIMIT $5::bigint
) matched;

-- name: get_dispatch_position
-- Where job $1 stands in its queue's dispatch order, on the database clock: the due pending
-- jobs of its queue that dispatch first, ordered as `dispatch_batch` orders them
-- (strict_fifo: priority DESC, scheduled_at, id; round_robin: rank inside the fairness
-- cohort, priority DESC, the cohort whose last job was claimed least recently, scheduled_at,
-- id), and how many of those are of other cohorts. Zero unless the job itself is due and
-- pending. It reads the queue's whole due backlog once: an operator query, never hot.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
target AS (
    SELECT j.id, j.queue, j.status, j.scheduled_at, COALESCE(q.mode, 'strict_fifo') AS mode
    FROM {schema}.jobs j
    LEFT JOIN {schema}.queues q ON q.name = j.queue
    WHERE j.id = $1::uuid
),
due AS (
    SELECT j.id, COALESCE(j.fairness_key, '__null__') AS cohort,
           -(j.priority::bigint) AS neg_priority, j.scheduled_at,
           row_number() OVER (
               PARTITION BY COALESCE(j.fairness_key, '__null__')
               ORDER BY j.priority DESC, j.scheduled_at, j.id
           ) AS cohort_rank
    FROM {schema}.jobs j
    JOIN target t ON t.queue = j.queue
    WHERE t.status = 'pending' AND t.scheduled_at <= (SELECT now FROM clock)
      AND j.status = 'pending' AND j.scheduled_at <= (SELECT now FROM clock)
),
served AS (
    -- dispatch_batch's cohort_turns, read for one queue: keep the two alike. Never served
    -- sorts first, as NULLS FIRST does in dispatch.
    SELECT c.cohort, COALESCE(s.last_started, '-infinity'::timestamptz) AS last_served
    FROM (SELECT DISTINCT d.cohort FROM due d) c
    CROSS JOIN target t
    CROSS JOIN LATERAL (
        SELECT max(j.claimed_at) AS last_started
        FROM {schema}.jobs j
        WHERE j.queue = t.queue AND COALESCE(j.fairness_key, '__null__') = c.cohort
          AND j.claimed_at IS NOT NULL
    ) s
),
ordered AS (
    SELECT d.*, s.last_served FROM due d JOIN served s ON s.cohort = d.cohort
),
me AS (
    SELECT o.* FROM ordered o WHERE o.id = $1::uuid
),
ahead AS (
    SELECT o.cohort, m.cohort AS my_cohort
    FROM ordered o
    CROSS JOIN me m
    CROSS JOIN target t
    WHERE o.id <> m.id
      AND CASE WHEN t.mode = 'round_robin'
               THEN (o.cohort_rank, o.neg_priority, o.last_served, o.scheduled_at, o.id)
                    < (m.cohort_rank, m.neg_priority, m.last_served, m.scheduled_at, m.id)
               ELSE (o.neg_priority, o.scheduled_at, o.id)
                    < (m.neg_priority, m.scheduled_at, m.id)
          END
)
SELECT t.mode, (SELECT now FROM clock) AS now,
       (SELECT count(*) FROM ahead) AS ahead,
       (SELECT count(*) FROM ahead a WHERE a.cohort <> a.my_cohort) AS ahead_other_cohorts
FROM target t;

-- fragment: queue_names
-- The CTEs that find every queue and the oldest pending job of each, shared by
-- get_dashboard_stats and fleet_queues (fleet.sql): pending_queues (the queues with pending
-- jobs), pending_heads (per queue and priority group, the head of the unkeyed and the keyed
-- jobs), other_pairs (the (status, queue) pairs of every other job) and names (every queue
-- with jobs or a row in queues). Included after WITH RECURSIVE (and the CTEs before it).
pending_queues AS (
    -- Loose index scan over jobs_fair_dispatch_idx (every pending job): one probe per queue.
    (SELECT j.queue FROM {schema}.jobs j WHERE j.status = 'pending' ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT n.queue
    FROM pending_queues p
    CROSS JOIN LATERAL (
        SELECT j.queue FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.queue > p.queue
        ORDER BY j.queue
        LIMIT 1
    ) n
),
pending_heads AS (
    -- Per queue, its priority groups from the top, each the older head of the unkeyed jobs
    -- (the '__null__' cohort of jobs_fair_dispatch_idx) and of the keyed ones
    -- (jobs_keyed_dispatch_idx). The two-head merge is dispatch's candidates (dispatch.sql)
    -- read for the oldest head, and the recursive step repeats the first probe below
    -- h.priority: a recursive CTE's seed and step cannot share one subquery.
    SELECT t.queue, t.priority, t.scheduled_at
    FROM pending_queues p
    CROSS JOIN LATERAL (
        SELECT x.queue, x.priority, x.scheduled_at
        FROM (
            (SELECT j.queue, j.priority, j.scheduled_at
             FROM {schema}.jobs j
             WHERE j.status = 'pending' AND j.queue = p.queue
               AND COALESCE(j.fairness_key, '__null__') = '__null__'
               AND j.fairness_key IS NULL
             ORDER BY j.priority DESC, j.scheduled_at, j.id
             LIMIT 1)
            UNION ALL
            (SELECT j.queue, j.priority, j.scheduled_at
             FROM {schema}.jobs j
             WHERE j.status = 'pending' AND j.queue = p.queue AND j.fairness_key IS NOT NULL
             ORDER BY j.priority DESC, j.scheduled_at, j.id
             LIMIT 1)
        ) x
        ORDER BY x.priority DESC, x.scheduled_at
        LIMIT 1
    ) t
    UNION ALL
    SELECT t.queue, t.priority, t.scheduled_at
    FROM pending_heads h
    CROSS JOIN LATERAL (
        -- The next priority group of the same queue.
        SELECT x.queue, x.priority, x.scheduled_at
        FROM (
            (SELECT j.queue, j.priority, j.scheduled_at
             FROM {schema}.jobs j
             WHERE j.status = 'pending' AND j.queue = h.queue
               AND COALESCE(j.fairness_key, '__null__') = '__null__'
               AND j.fairness_key IS NULL AND j.priority < h.priority
             ORDER BY j.priority DESC, j.scheduled_at, j.id
             LIMIT 1)
            UNION ALL
            (SELECT j.queue, j.priority, j.scheduled_at
             FROM {schema}.jobs j
             WHERE j.status = 'pending' AND j.queue = h.queue AND j.fairness_key IS NOT NULL
               AND j.priority < h.priority
             ORDER BY j.priority DESC, j.scheduled_at, j.id
             LIMIT 1)
        ) x
        ORDER BY x.priority DESC, x.scheduled_at
        LIMIT 1
    ) t
),
-- fleet_actors' pending_pairs (fleet.sql) is the same loose index scan over another index and
-- key: the idiom repeats, the columns do not.
other_pairs AS (
    (SELECT j.status, j.queue
     FROM {schema}.jobs j
     WHERE j.status <> 'pending'
     ORDER BY j.status, j.queue
     LIMIT 1)
    UNION ALL
    SELECT n.status, n.queue
    FROM other_pairs p
    CROSS JOIN LATERAL (
        SELECT j.status, j.queue
        FROM {schema}.jobs j
        WHERE j.status <> 'pending' AND (j.status, j.queue) > (p.status, p.queue)
        ORDER BY j.status, j.queue
        LIMIT 1
    ) n
),
names AS (
    SELECT p.queue AS name FROM pending_queues p
    UNION
    SELECT p.queue FROM other_pairs p
    UNION
    SELECT q.name FROM {schema}.queues q
)

-- name: get_dashboard_stats
-- The live dashboard's per-queue activity, on the database clock ($1 window for the
-- terminal counts, $2 minutes of per-minute finished counts, $3 due scheduled jobs read at
-- most). It must stay cheap on a
-- large table, so every read of jobs walks an index:
-- * the queues with pending jobs come from a loose index scan over jobs_fair_dispatch_idx,
--   one probe per queue; then a walk per queue stops once per priority, in the unkeyed
--   jobs' cohort of that index and in jobs_keyed_dispatch_idx: the first entry of each
--   group is that group's longest-waiting job, so the walk yields each queue's oldest;
-- * the queues with other jobs come from a loose index scan of jobs_status_queue_idx, one
--   probe per (status, queue) pair;
-- * the counts are per queue and status, each an index (only) scan of the matching partial
--   index, never one GROUP BY over the table (which the planner answers with a seq scan);
-- * finished jobs are read by (status, finished_at) from jobs_finished_idx, bounded by the
--   larger of the two windows.
WITH RECURSIVE clock AS (
    SELECT clock_timestamp() AS now
),
{fragment:queue_names},
finished AS MATERIALIZED (
    SELECT j.queue, j.status,
           GREATEST(floor(extract(epoch FROM (SELECT now FROM clock) - j.finished_at) / 60),
                    0)::integer AS minute_ago,
           j.finished_at >= (SELECT now FROM clock) - $1::interval AS in_window
    FROM {schema}.jobs j
    WHERE j.status IN ('succeeded', 'failed', 'cancelled', 'crashed', 'abandoned')
      AND j.finished_at >= (SELECT now FROM clock)
                           - GREATEST($1::interval, make_interval(mins => $2::integer))
),
finished_counts AS MATERIALIZED (
    SELECT f.queue, array_agg(f.status::text ORDER BY f.status) AS statuses,
           array_agg(f.n ORDER BY f.status) AS counts
    FROM (
        SELECT f.queue, f.status, count(*) AS n
        FROM finished f
        WHERE f.in_window
        GROUP BY f.queue, f.status
    ) f
    GROUP BY f.queue
),
per_minute AS MATERIALIZED (
    SELECT f.queue, array_agg(f.minute_ago ORDER BY f.minute_ago) AS minutes_ago,
           array_agg(f.n ORDER BY f.minute_ago) AS counts
    FROM (
        SELECT f.queue, f.minute_ago, count(*) AS n
        FROM finished f
        WHERE f.minute_ago < $2::integer
        GROUP BY f.queue, f.minute_ago
    ) f
    GROUP BY f.queue
),
-- The due jobs still scheduled, oldest first along jobs_scheduled_idx, at most $3: each
-- queue's longest-due one (what no promotion moved: the dashboard's "no leader" hint).
due_scheduled AS MATERIALIZED (
    SELECT d.queue, min(d.scheduled_at) AS oldest
    FROM (
        SELECT j.queue, j.scheduled_at
        FROM {schema}.jobs j
        WHERE j.status = 'scheduled' AND j.scheduled_at <= (SELECT now FROM clock)
        ORDER BY j.scheduled_at
        LIMIT $3::integer
    ) d
    GROUP BY d.queue
)
-- One row per queue; with no queue at all, one row whose name is NULL (it carries `now`).
SELECT k.now, n.name, COALESCE(s.mode, 'strict_fifo') AS mode, s.max_concurrent,
       COALESCE(s.paused, false) AS paused,
       (SELECT count(*) FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.queue = n.name) AS pending,
       (SELECT count(*) FROM {schema}.jobs j
        WHERE j.status = 'scheduled' AND j.queue = n.name) AS scheduled,
       (SELECT count(*) FROM {schema}.jobs j
        WHERE j.status = 'running' AND j.queue = n.name AND j.started_at IS NOT NULL)
           AS running,
       (SELECT count(*) FROM {schema}.jobs j
        WHERE j.status = 'running' AND j.queue = n.name AND j.started_at IS NULL) AS claimed,
       (SELECT min(h.scheduled_at) FROM pending_heads h WHERE h.queue = n.name)
           AS oldest_pending_at,
       (SELECT min(j.claimed_at) FROM {schema}.jobs j
        WHERE j.status = 'running' AND j.queue = n.name AND j.started_at IS NULL)
           AS oldest_claimed_at,
       d.oldest AS oldest_due_scheduled_at,
       COALESCE(c.statuses, '{}') AS finished_statuses, COALESCE(c.counts, '{}') AS finished_counts,
       COALESCE(m.minutes_ago, '{}') AS minutes_ago, COALESCE(m.counts, '{}') AS minute_counts
FROM clock k
LEFT JOIN names n ON true
LEFT JOIN {schema}.queues s ON s.name = n.name
LEFT JOIN finished_counts c ON c.queue = n.name
LEFT JOIN per_minute m ON m.queue = n.name
LEFT JOIN due_scheduled d ON d.queue = n.name
ORDER BY n.name;

-- fragment: job_summary_columns
-- Every column of a job but payload, result and error_traceback (JobSummary): what the
-- listings read, so a page costs the same whatever its jobs carry (a TOASTed payload is not
-- even fetched). rows.job_summary reads them by name.
j.id, j.actor, j.queue, j.status, j.priority, j.scheduled_at, j.created_at, j.retry_kind,
    j.max_attempts, j.attempt, j.locked_by_worker, j.lock_expires_at, j.claimed_at,
    j.started_at, j.finished_at, j.cancel_phase, j.cancel_requested_at, j.cancel_reason,
    j.identity_key, j.fairness_key, j.schedule_to_close, j.result_ttl, j.result_expires_at,
    j.error_class, j.error_message, j.metadata, j.trace_id, j.span_id, j.progress_seq,
    j.progress_state, j.updated_at, j.unique_key, j.unique_until, j.unstarted_reclaims,
    j.uncounted_attempts

-- name: list_recent_jobs
-- The dashboard's jobs pane (JobSummary columns): jobs matching $1 statuses (NULL: any), $2 queue and $3 actor,
-- most recent activity first, at most $4 rows. Each status group is read newest
-- first from an index of its own: finished jobs per status from jobs_finished_idx
-- (status, finished_at DESC), running ones from the running partial indexes (a worker's
-- capacity bounds them), waiting ones from jobs_created_idx. The per-branch LIMIT is a
-- literal (RECENT_JOBS_MAX in protocol.py) on purpose: the generic plan then knows it needs
-- a few rows and walks the ordered index instead of sorting every match. The optional
-- filters are spelled COALESCE(column = $n, true), not ($n IS NULL OR column = $n): the OR
-- form is estimated so selective that the generic plan sorts every row of a status instead.
WITH finished AS (
    SELECT f.*
    FROM unnest(COALESCE($1::text[], ARRAY['succeeded', 'failed', 'cancelled', 'crashed',
                                           'abandoned'])) AS s(status)
    CROSS JOIN LATERAL (
        SELECT {fragment:job_summary_columns}, j.finished_at AS activity_at
        FROM {schema}.jobs j
        WHERE j.status = s.status::{schema}.job_status AND j.finished_at IS NOT NULL
          AND COALESCE(j.queue = $2::text, true)
          AND COALESCE(j.actor = $3::text, true)
        ORDER BY j.finished_at DESC
        LIMIT 200
    ) f
    WHERE s.status IN ('succeeded', 'failed', 'cancelled', 'crashed', 'abandoned')
),
running AS (
    SELECT {fragment:job_summary_columns}, COALESCE(j.started_at, j.claimed_at) AS activity_at
    FROM {schema}.jobs j
    WHERE j.status = 'running' AND ($1::text[] IS NULL OR 'running' = ANY ($1::text[]))
      AND COALESCE(j.queue = $2::text, true)
      AND COALESCE(j.actor = $3::text, true)
    ORDER BY COALESCE(j.started_at, j.claimed_at) DESC
    LIMIT 200
),
-- pending and scheduled repeat running's shape on purpose: each status group keeps its own
-- LIMIT (one merged branch would share 200 rows between them).
pending AS (
    SELECT {fragment:job_summary_columns}, j.created_at AS activity_at
    FROM {schema}.jobs j
    WHERE j.status = 'pending' AND ($1::text[] IS NULL OR 'pending' = ANY ($1::text[]))
      AND COALESCE(j.queue = $2::text, true)
      AND COALESCE(j.actor = $3::text, true)
    ORDER BY j.created_at DESC
    LIMIT 200
),
scheduled AS (
    SELECT {fragment:job_summary_columns}, j.created_at AS activity_at
    FROM {schema}.jobs j
    WHERE j.status = 'scheduled' AND ($1::text[] IS NULL OR 'scheduled' = ANY ($1::text[]))
      AND COALESCE(j.queue = $2::text, true)
      AND COALESCE(j.actor = $3::text, true)
    ORDER BY j.created_at DESC
    LIMIT 200
)
SELECT r.*
FROM (
    SELECT * FROM finished
    UNION ALL SELECT * FROM running
    UNION ALL SELECT * FROM pending
    UNION ALL SELECT * FROM scheduled
) r
ORDER BY r.activity_at DESC, r.id DESC
LIMIT $4::bigint;

-- name: find_job_ids_by_prefix
-- Ids of live or archived jobs in [$1, $2] (a hex prefix padded with 0s and with fs): a
-- range read of each primary key. UUIDs compare bytewise, as their hex digits do.
(SELECT j.id FROM {schema}.jobs j WHERE j.id BETWEEN $1::uuid AND $2::uuid
 ORDER BY j.id LIMIT $3::bigint)
UNION ALL
(SELECT a.id FROM {schema}.jobs_archive a WHERE a.id BETWEEN $1::uuid AND $2::uuid
   AND a.expire_at >= clock_timestamp()
 ORDER BY a.id LIMIT $3::bigint);

-- name: find_job_ids_by_suffix
-- Ids of live or archived jobs whose hex digits end with $1 ($2 digits long). No index
-- serves a suffix: this scans the ids, stopping at $3 matches (no ORDER BY, so the LIMIT
-- ends the scan early); the caller bounds it with a statement timeout.
SELECT j.id FROM {schema}.jobs j WHERE right(replace(j.id::text, '-', ''), $2::integer) = $1::text
UNION ALL
SELECT a.id FROM {schema}.jobs_archive a
WHERE right(replace(a.id::text, '-', ''), $2::integer) = $1::text
  AND a.expire_at >= clock_timestamp()
LIMIT $3::bigint;

-- name: set_local_statement_timeout
-- Bound the rest of this transaction's statements ($1: a duration PostgreSQL reads, '5s').
SELECT set_config('statement_timeout', $1::text, true);

-- fragment: job_search_filter
-- The WHERE clause of search_jobs and count_search_jobs ($1..$12: statuses, queues,
-- actors, created since/until, finished since/until, batch; see search_jobs).
WHERE ($1::{schema}.job_status[] IS NULL OR j.status = ANY ($1::{schema}.job_status[]))
  AND ($2::text[] IS NULL
       OR (j.status = 'pending' AND j.queue = ANY ($2::text[]))
       OR (j.status IN ('waiting', 'scheduled', 'running', 'succeeded', 'failed', 'cancelled',
                        'crashed', 'abandoned')
           AND j.queue = ANY ($2::text[])))
  AND ($3::text[] IS NULL OR j.actor = ANY ($3::text[]))
  AND (($4::timestamptz IS NULL AND $5::interval IS NULL)
       OR j.created_at >= COALESCE($4::timestamptz, statement_timestamp() - $5::interval))
  AND (($6::timestamptz IS NULL AND $7::interval IS NULL)
       OR j.created_at < COALESCE($6::timestamptz, statement_timestamp() - $7::interval))
  AND (($8::timestamptz IS NULL AND $9::interval IS NULL)
       OR (j.finished_at >= COALESCE($8::timestamptz, statement_timestamp() - $9::interval)
           AND j.status IN ('succeeded', 'failed', 'cancelled', 'crashed', 'abandoned')))
  AND (($10::timestamptz IS NULL AND $11::interval IS NULL)
       OR (j.finished_at < COALESCE($10::timestamptz, statement_timestamp() - $11::interval)
           AND j.created_at < COALESCE($10::timestamptz, statement_timestamp() - $11::interval)
           AND j.status IN ('succeeded', 'failed', 'cancelled', 'crashed', 'abandoned')))
  AND ($12::uuid IS NULL
       OR (j.metadata->>'batch_id' = $12::uuid::text AND j.metadata ? 'batch_id'))

-- name: search_jobs
-- A page of `jobs list` and of the admin UI's jobs page: $1 statuses, $2 queues, $3 actors
-- (NULL: any), created_at from $4 (a moment) or $5 (an age on the database clock) and before
-- $6 / $7, finished_at from $8 / $9 and before $10 / $11, $12 a batch's children, after the
-- cursor ($13 created_at, $14 id) of the previous page, newest first, $15 rows. Run with
-- custom plans: an absent bound's test folds away and a given one is a range the created_at
-- or finished_at index serves (statement_timestamp is one moment for the statement). The
-- statuses come as the enum array itself (a cast from text[] would hide the values from
-- the planner). What else the finished bounds say lets indexes serve them: only terminal
-- jobs have a finished_at (jobs_finished_idx leads with the status), and a job finished
-- before a moment was created before it. The queues are tested per status family, so a
-- queue with few jobs is found along the pending dispatch indexes and jobs_status_queue_idx
-- (its status list is every status but pending) rather than by walking the table. The batch
-- test repeats jobs_batch_idx's predicate.
-- The filter is the job_search_filter fragment, shared with count_search_jobs; the columns
-- are a JobSummary's (no payload, result or traceback).
SELECT {fragment:job_summary_columns}
FROM {schema}.jobs j
{fragment:job_search_filter}
  AND ($13::timestamptz IS NULL OR (j.created_at, j.id) < ($13::timestamptz, $14::uuid))
ORDER BY j.created_at DESC, j.id DESC
LIMIT $15::bigint;

-- name: count_search_jobs
-- How many jobs `search_jobs` matches without a cursor ($1..$12 as there), at most $13.
SELECT count(*) AS count
FROM (
    SELECT 1
    FROM {schema}.jobs j
    {fragment:job_search_filter}
    LIMIT $13::bigint
) matched;

-- name: last_event_id
-- The newest job_events id visible now: an audited operator write reads it first, so the
-- events its own statements write afterwards are the ones above it (ids come from one
-- sequence, drawn later).
SELECT COALESCE(max(e.id), 0) AS id FROM {schema}.job_events e;

-- name: stamp_operator_events
-- Who and why ($2, JSON object text) merged into the detail of every job event this
-- transaction wrote after event $1 (last_event_id). The id range walks the primary key from
-- $1; xmin keeps a concurrent writer's events out; an event dated before this transaction
-- began is a worker's claim the settle wrote late (settle.sql), not the operator's act. The
-- statements that write the events (cancel, retry, settle) stay the one home of their
-- rules, and the stamp commits with them.
UPDATE {schema}.job_events e
SET detail = e.detail || $2::text::jsonb
WHERE e.id > $1::bigint AND e.xmin = pg_current_xact_id()::xid AND e.occurred_at >= now();

-- name: move_jobs
-- Move the newest $5 waiting jobs matching the filter ($1 statuses or NULL, $2 queue,
-- $3 actor, $4 ids) to queue $6, locked in id order (as every bulk writer locks), keeping
-- scheduled_at and priority: a job keeps its place in time in the new queue. One
-- queue_move event each (the status does not change), and a wake ($7) when a pending job
-- moved: a worker of the new queue may be idle.
WITH clock AS (
    SELECT clock_timestamp() AS now
),
matched AS (
    SELECT j.id
    FROM {schema}.jobs j
    WHERE j.status IN ('pending', 'scheduled')
      AND {fragment:job_filter}
      AND j.queue <> $6::text
    ORDER BY j.created_at DESC, j.id DESC
    LIMIT $5::bigint
),
target AS (
    SELECT j.id, j.queue
    FROM {schema}.jobs j
    JOIN matched m ON m.id = j.id
    WHERE j.status IN ('pending', 'scheduled')
    ORDER BY j.id
    FOR UPDATE OF j
),
moved AS (
    UPDATE {schema}.jobs j
    SET queue = $6::text, updated_at = k.now
    FROM target t CROSS JOIN clock k
    WHERE j.id = t.id
    RETURNING j.id, j.status, t.queue AS from_queue
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, detail)
    SELECT m.id, 'queue_move', m.status, m.status,
           jsonb_build_object('from_queue', m.from_queue, 'to_queue', $6::text)
    FROM moved m
    ORDER BY m.id
),
woken AS (
    SELECT pg_notify($7::text, '') WHERE EXISTS (SELECT 1 FROM moved m WHERE m.status = 'pending')
)
SELECT (SELECT count(*) FROM moved) AS moved, (SELECT count(*) FROM woken) AS woken;

-- name: purge_jobs
-- Delete the newest $5 jobs matching the filter ($1 statuses or NULL, $2 queue, $3 actor,
-- $4 ids) that no worker holds (every status but running), locked in id order; their
-- attempts and events go with them (ON DELETE CASCADE). Running matches are counted and
-- left. One operator_log row records who ($6), why ($7), the filter ($8, JSON text) and
-- the counts, in the same statement: the purge and its record commit together.
WITH matched AS (
    SELECT j.id, j.status
    FROM {schema}.jobs j
    WHERE {fragment:job_filter}
    ORDER BY j.created_at DESC, j.id DESC
    LIMIT $5::bigint
),
target AS (
    SELECT j.id
    FROM {schema}.jobs j
    JOIN matched m ON m.id = j.id
    WHERE j.status <> 'running'
    ORDER BY j.id
    FOR UPDATE OF j
),
-- The plain DELETE … USING … RETURNING of every batched delete (sweep_idle_limiter_state's
-- in ratelimit.sql): one table and key each, nothing to share.
deleted AS (
    DELETE FROM {schema}.jobs j
    USING target t
    WHERE j.id = t.id
    RETURNING j.status
),
counts AS (
    SELECT d.status::text AS status, count(*) AS n FROM deleted d GROUP BY d.status
),
logged AS (
    INSERT INTO {schema}.operator_log (action, by_operator, reason, detail)
    SELECT 'purge', $6::text, $7::text,
           jsonb_build_object(
               'filter', $8::text::jsonb,
               'deleted', COALESCE((SELECT jsonb_object_agg(c.status, c.n) FROM counts c),
                                   '{}'::jsonb),
               'running_skipped',
               (SELECT count(*) FROM matched m WHERE m.status = 'running'))
)
SELECT COALESCE((SELECT array_agg(c.status ORDER BY c.status) FROM counts c), '{}') AS statuses,
       COALESCE((SELECT array_agg(c.n ORDER BY c.status) FROM counts c), '{}') AS counts,
       (SELECT count(*) FROM matched m WHERE m.status = 'running') AS running_skipped;

-- name: insert_operator_log
-- One operator_log row: $1 action, $2 target, $3 who, $4 why, $5 detail (JSON text).
INSERT INTO {schema}.operator_log (action, target, by_operator, reason, detail)
VALUES ($1::text, $2::text, $3::text, $4::text, $5::text::jsonb);

-- name: list_operator_log
-- Operator log entries, newest first: every one, or only target $1's and action $3's; at
-- most $2.
SELECT o.id, o.occurred_at, o.action, o.target, o.by_operator, o.reason, o.detail
FROM {schema}.operator_log o
WHERE ($1::text IS NULL OR o.target = $1::text) AND ($3::text IS NULL OR o.action = $3::text)
ORDER BY o.id DESC
LIMIT $2::bigint;

-- name: lock_actor_config
-- One actor_config row, locked for an audited change (its old values go to the log).
SELECT * FROM {schema}.actor_config WHERE actor = $1::text FOR UPDATE;
