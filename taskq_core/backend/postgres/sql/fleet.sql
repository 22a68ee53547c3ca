-- Fleet: the queue-level picture a Prometheus scrape reports once for the whole fleet
-- (taskq_core/obs/fleet.py). Three statements, read in one REPEATABLE READ transaction so they
-- see one snapshot, and "now" is transaction_timestamp(): the same instant in all three. Each
-- must stay cheap on a jobs table of millions of rows: every read of jobs walks an index, and
-- only the window's finished rows and the running rows (bounded by the fleet's concurrency)
-- are fetched from the heap.

-- name: fleet_clock
-- The read's "now": the transaction's start, the instant every statement below counts from.
SELECT transaction_timestamp() AS now;

-- name: fleet_queues
-- Per queue: its pause flag, its scheduled jobs and its oldest pending job's scheduled_at.
-- The queues are those with jobs in any status or a row in `queues`:
-- * the queues with pending jobs come from a loose index scan over jobs_fair_dispatch_idx,
--   one probe per queue, the others from one over jobs_status_queue_idx, one probe per
--   (status, queue) pair;
-- * scheduled counts are index (only) scans of jobs_status_queue_idx;
-- * the oldest pending job: pending_heads, from the queue_names fragment (admin.sql) that
--   get_dashboard_stats reads too.
WITH RECURSIVE {fragment:queue_names}
SELECT n.name, COALESCE(s.paused, false) AS paused,
       (SELECT count(*) FROM {schema}.jobs j
        WHERE j.status = 'scheduled' AND j.queue = n.name) AS scheduled,
       (SELECT min(h.scheduled_at) FROM pending_heads h WHERE h.queue = n.name)
           AS oldest_pending_at
FROM names n
LEFT JOIN {schema}.queues s ON s.name = n.name
ORDER BY n.name;

-- name: fleet_actors
-- Per (queue, actor) with jobs waiting or running: pending jobs, running ones whose body
-- started, and claimed ones (running, not started yet).
-- * the (actor, queue) pairs with pending jobs come from a loose index scan over
--   jobs_dispatch_idx, one probe per pair; each count is an index (only) scan of its range;
-- * running rows are few (the fleet's concurrency bounds them): read through the running
--   partial indexes and grouped.
-- pending_pairs is the loose index scan of queue_names' other_pairs (admin.sql) over another
-- index and key, (actor, queue) of pending jobs: the idiom repeats, the columns do not.
WITH RECURSIVE pending_pairs AS (
    (SELECT j.actor, j.queue
     FROM {schema}.jobs j
     WHERE j.status = 'pending'
     ORDER BY j.actor, j.queue
     LIMIT 1)
    UNION ALL
    SELECT n.actor, n.queue
    FROM pending_pairs p
    CROSS JOIN LATERAL (
        SELECT j.actor, j.queue
        FROM {schema}.jobs j
        WHERE j.status = 'pending' AND (j.actor, j.queue) > (p.actor, p.queue)
        ORDER BY j.actor, j.queue
        LIMIT 1
    ) n
),
pending AS (
    SELECT p.queue, p.actor,
           (SELECT count(*) FROM {schema}.jobs j
            WHERE j.status = 'pending' AND j.actor = p.actor AND j.queue = p.queue) AS n
    FROM pending_pairs p
),
running AS (
    SELECT j.queue, j.actor, count(j.started_at) AS started,
           count(*) - count(j.started_at) AS claimed
    FROM {schema}.jobs j
    WHERE j.status = 'running'
    GROUP BY j.queue, j.actor
)
SELECT COALESCE(p.queue, r.queue) AS queue, COALESCE(p.actor, r.actor) AS actor,
       COALESCE(p.n, 0) AS pending, COALESCE(r.started, 0) AS running,
       COALESCE(r.claimed, 0) AS claimed
FROM pending p
FULL JOIN running r ON r.queue = p.queue AND r.actor = p.actor
ORDER BY 1, 2;

-- name: fleet_finished
-- Jobs finished within the window ($1) per (queue, actor, status), and how long the jobs
-- that started within it waited from due to start (started_at - scheduled_at, never below
-- 0): per queue (actor NULL) and per (queue, actor), with their count, mean, the 50th, 95th
-- and 99th percentiles (percentile_cont: linear between the two nearest) and the longest.
-- A job started within the window is running now or finished within it (it cannot finish
-- before it started); one waiting again for a retry is left out.
-- * finished rows are read by (status, finished_at) from jobs_finished_idx, one range per
--   terminal status, and fetched from the heap (the queue and actor are not in the index):
--   the cost of this statement grows with the jobs finished within the window;
-- * running rows as in fleet_actors.
WITH finished AS MATERIALIZED (
    SELECT j.queue, j.actor, j.status, j.started_at, j.scheduled_at
    FROM {schema}.jobs j
    WHERE j.status IN ('succeeded', 'failed', 'cancelled', 'crashed', 'abandoned')
      AND j.finished_at >= transaction_timestamp() - $1::interval
),
counts AS (
    SELECT f.queue, f.actor, array_agg(f.status::text ORDER BY f.status) AS statuses,
           array_agg(f.n ORDER BY f.status) AS counts
    FROM (
        SELECT f.queue, f.actor, f.status, count(*) AS n
        FROM finished f
        GROUP BY f.queue, f.actor, f.status
    ) f
    GROUP BY f.queue, f.actor
),
waits AS (
    SELECT s.queue, s.actor,
           GREATEST(extract(epoch FROM s.started_at - s.scheduled_at), 0)::float8 AS wait
    FROM (
        SELECT f.queue, f.actor, f.started_at, f.scheduled_at FROM finished f
        UNION ALL
        SELECT j.queue, j.actor, j.started_at, j.scheduled_at
        FROM {schema}.jobs j
        WHERE j.status = 'running' AND j.started_at IS NOT NULL
    ) s
    WHERE s.started_at >= transaction_timestamp() - $1::interval
),
latency AS (
    SELECT w.queue, w.actor, count(*) AS started, avg(w.wait) AS mean,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]::float8[]) WITHIN GROUP (ORDER BY w.wait)
               AS percentiles,
           max(w.wait) AS longest
    FROM waits w
    GROUP BY GROUPING SETS ((w.queue), (w.queue, w.actor))
)
SELECT COALESCE(c.queue, l.queue) AS queue, COALESCE(c.actor, l.actor) AS actor,
       COALESCE(c.statuses, '{}') AS statuses, COALESCE(c.counts, '{}') AS counts,
       COALESCE(l.started, 0) AS started, l.mean, l.percentiles, l.longest
FROM counts c
FULL JOIN (SELECT * FROM latency WHERE actor IS NOT NULL) l
    ON l.queue = c.queue AND l.actor = c.actor
UNION ALL
SELECT l.queue, NULL, '{}', '{}', l.started, l.mean, l.percentiles, l.longest
FROM latency l
WHERE l.actor IS NULL
ORDER BY 1, 2 NULLS FIRST;
