-- Dispatch: claim due pending jobs for one worker in ONE atomic UPDATE ... RETURNING.
--
-- Parameters: $1 queues (text[], in the worker's order), $2 limit, $3 worker id, $4 lock
-- lease (interval), $5 per-actor oversample factor.
--
-- Shape (both queue modes in one statement, so a dispatch is one round trip):
--   queue_capacity   requested, unpaused queues: mode, mode-group order, residual room under
--                    queues.max_concurrent (running jobs of the queue counted only when capped)
--   fifo_actors      loose index scans: the distinct actors with pending work per strict_fifo
--   rr_cohorts       queue, and the distinct (actor, fairness cohort) pairs per round_robin
--                    queue; one index probe per distinct value, however deep the backlog
--   actor_capacity   residual per actor = max_concurrent - running (all queues), or $2
--   candidates       CROSS JOIN LATERAL per actor (strict_fifo: priority DESC, scheduled_at,
--                    id) or per cohort (round_robin: the same order inside a cohort, ranked
--                    by fairness_rank = ROW_NUMBER() per cohort), each LIMITed to the actor's
--                    residual * $5: oversampling absorbs what the filters below drop
--   identity_dedup   at most one job per (actor, identity_key), none if one is running
--   ranked           capped actors: actor_rank <= actor residual; then, in capped queues,
--                    queue_rank <= queue residual. Uncapped actors and queues are not
--                    pre-filtered: the global LIMIT below applies after SKIP LOCKED, so
--                    dispatchers racing for the same head rows fall through to the next ones
--                    of the window instead of coming back empty.
--   locked           FOR UPDATE SKIP LOCKED, LIMIT $2, in dispatch order. FOR UPDATE cannot
--                    share a SELECT with window functions, hence its own CTE.
--   eligible         the boolean gate in_flight < max_concurrent and the rank cap
--                    actor_rank <= max_concurrent - in_flight over what was really locked
--   claimed          UPDATE ... WHERE status = 'pending' (the final race guard), + events
--
-- Concurrent dispatchers each read the running counts of their own snapshot, so together
-- they can exceed a cap by at most (dispatchers - 1) * cap: a documented, bounded trade.
-- Round-robin reads at most a bounded number of rows per actor: with many cohorts each one
-- contributes ceil(window / cohorts) + 1 candidates, so a round may fill less than $2 when
-- the backlog is concentrated in a few of many cohorts; the next round continues.

-- name: dispatch_batch
WITH RECURSIVE clock AS (
    SELECT clock_timestamp() AS now
),
requested AS (
    SELECT r.name AS queue, min(r.ord) AS ord
    FROM unnest($1::text[]) WITH ORDINALITY AS r(name, ord)
    GROUP BY r.name
),
queue_capacity AS (
    SELECT r.queue,
           COALESCE(q.mode, 'strict_fifo') AS mode,
           min(r.ord) OVER (PARTITION BY COALESCE(q.mode, 'strict_fifo')) AS mode_order,
           q.max_concurrent,
           CASE WHEN q.max_concurrent IS NULL THEN $2::bigint
                ELSE LEAST($2::bigint, q.max_concurrent - (
                    SELECT count(*) FROM {schema}.jobs rj
                    WHERE rj.status = 'running' AND rj.queue = r.queue))
           END AS residual
    FROM requested r
    LEFT JOIN {schema}.queues q ON q.name = r.queue
    WHERE NOT COALESCE(q.paused, false)
),
fifo_actors AS (
    SELECT qc.queue, a.actor
    FROM queue_capacity qc
    CROSS JOIN LATERAL (
        SELECT j.actor
        FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.queue = qc.queue
        ORDER BY j.actor
        LIMIT 1
    ) a
    WHERE qc.mode = 'strict_fifo' AND qc.residual > 0
    UNION ALL
    SELECT f.queue, a.actor
    FROM fifo_actors f
    CROSS JOIN LATERAL (
        SELECT j.actor
        FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.queue = f.queue AND j.actor > f.actor
        ORDER BY j.actor
        LIMIT 1
    ) a
),
rr_cohorts AS (
    SELECT qc.queue, c.actor, c.cohort
    FROM queue_capacity qc
    CROSS JOIN LATERAL (
        SELECT j.actor, COALESCE(j.fairness_key, '__null__') AS cohort
        FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.queue = qc.queue
        ORDER BY j.actor, COALESCE(j.fairness_key, '__null__')
        LIMIT 1
    ) c
    WHERE qc.mode = 'round_robin' AND qc.residual > 0
    UNION ALL
    SELECT rc.queue, c.actor, c.cohort
    FROM rr_cohorts rc
    CROSS JOIN LATERAL (
        SELECT j.actor, COALESCE(j.fairness_key, '__null__') AS cohort
        FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.queue = rc.queue
          AND (j.actor, COALESCE(j.fairness_key, '__null__')) > (rc.actor, rc.cohort)
        ORDER BY j.actor, COALESCE(j.fairness_key, '__null__')
        LIMIT 1
    ) c
),
rr_actors AS (
    SELECT rc.queue, rc.actor, count(*) AS cohorts
    FROM rr_cohorts rc
    GROUP BY rc.queue, rc.actor
),
actor_capacity AS (
    SELECT a.actor, ac.max_concurrent, f.in_flight,
           CASE WHEN ac.max_concurrent IS NULL THEN $2::bigint
                ELSE LEAST($2::bigint, ac.max_concurrent - f.in_flight) END AS residual
    FROM (
        SELECT actor FROM fifo_actors
        UNION
        SELECT actor FROM rr_actors
    ) a
    LEFT JOIN {schema}.actor_config ac ON ac.actor = a.actor
    CROSS JOIN LATERAL (
        -- Running jobs are counted only for capped actors.
        SELECT CASE WHEN ac.max_concurrent IS NULL THEN 0::bigint
                    ELSE (SELECT count(*) FROM {schema}.jobs rj
                          WHERE rj.status = 'running' AND rj.actor = a.actor) END AS in_flight
    ) f
),
candidates AS (
    SELECT c.id, c.actor, c.queue, c.identity_key, c.priority, c.scheduled_at,
           qc.mode_order, 1::bigint AS fairness_rank
    FROM fifo_actors fa
    JOIN queue_capacity qc ON qc.queue = fa.queue
    JOIN actor_capacity acap ON acap.actor = fa.actor
    CROSS JOIN LATERAL (
        SELECT j.id, j.actor, j.queue, j.identity_key, j.priority, j.scheduled_at
        FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.actor = fa.actor AND j.queue = fa.queue
          AND j.scheduled_at <= (SELECT now FROM clock)
        ORDER BY j.priority DESC, j.scheduled_at, j.id
        LIMIT acap.residual * $5::bigint
    ) c
    WHERE acap.residual > 0
    UNION ALL
    SELECT c.id, c.actor, c.queue, c.identity_key, c.priority, c.scheduled_at,
           qc.mode_order,
           row_number() OVER (
               PARTITION BY c.cohort ORDER BY c.priority DESC, c.scheduled_at, c.id
           ) AS fairness_rank
    FROM rr_cohorts rc
    JOIN rr_actors ra ON ra.queue = rc.queue AND ra.actor = rc.actor
    JOIN queue_capacity qc ON qc.queue = rc.queue
    JOIN actor_capacity acap ON acap.actor = rc.actor
    CROSS JOIN LATERAL (
        SELECT j.id, j.actor, j.queue, j.identity_key, j.priority, j.scheduled_at,
               COALESCE(j.fairness_key, '__null__') AS cohort
        FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.queue = rc.queue AND j.actor = rc.actor
          AND COALESCE(j.fairness_key, '__null__') = rc.cohort
          AND j.scheduled_at <= (SELECT now FROM clock)
        ORDER BY j.priority DESC, j.scheduled_at, j.id
        -- The actor's whole window from every cohort while that stays small; past ~1000
        -- rows, an even share per cohort.
        LIMIT CASE WHEN ra.cohorts * acap.residual * $5::bigint <= 1000
                   THEN acap.residual * $5::bigint
                   ELSE GREATEST((acap.residual * $5::bigint + ra.cohorts - 1) / ra.cohorts + 1,
                                 1000 / ra.cohorts)
              END
    ) c
    WHERE acap.residual > 0
),
identity_free AS (
    SELECT c.*
    FROM candidates c
    WHERE c.identity_key IS NULL
       OR NOT EXISTS (
           SELECT 1 FROM {schema}.jobs rj
           WHERE rj.status = 'running' AND rj.actor = c.actor
             AND rj.identity_key = c.identity_key)
),
identity_dedup AS (
    (
        SELECT DISTINCT ON (f.actor, f.identity_key) f.*
        FROM identity_free f
        WHERE f.identity_key IS NOT NULL
        ORDER BY f.actor, f.identity_key, f.mode_order, f.fairness_rank, f.priority DESC,
                 f.scheduled_at, f.id
    )
    UNION ALL
    SELECT f.* FROM identity_free f WHERE f.identity_key IS NULL
),
actor_ranked AS (
    SELECT d.*,
           row_number() OVER (
               PARTITION BY d.actor
               ORDER BY d.mode_order, d.fairness_rank, d.priority DESC, d.scheduled_at, d.id
           ) AS actor_rank
    FROM identity_dedup d
),
ranked AS (
    SELECT a.*,
           row_number() OVER (
               PARTITION BY a.queue
               ORDER BY a.mode_order, a.fairness_rank, a.priority DESC, a.scheduled_at, a.id
           ) AS queue_rank
    FROM actor_ranked a
    JOIN actor_capacity acap ON acap.actor = a.actor
    WHERE acap.max_concurrent IS NULL OR a.actor_rank <= acap.residual
),
locked AS (
    SELECT j.id, r.actor, r.mode_order, r.fairness_rank, r.priority, r.scheduled_at
    FROM {schema}.jobs j
    JOIN ranked r ON r.id = j.id
    JOIN queue_capacity qc ON qc.queue = r.queue
    WHERE j.status = 'pending' AND (qc.max_concurrent IS NULL OR r.queue_rank <= qc.residual)
    ORDER BY r.mode_order, r.fairness_rank, r.priority DESC, r.scheduled_at, r.id
    LIMIT $2::bigint
    FOR UPDATE OF j SKIP LOCKED
),
eligible AS (
    SELECT l.id, l.mode_order, l.fairness_rank
    FROM (
        SELECT l.*,
               row_number() OVER (
                   PARTITION BY l.actor
                   ORDER BY l.mode_order, l.fairness_rank, l.priority DESC, l.scheduled_at, l.id
               ) AS actor_rank
        FROM locked l
    ) l
    JOIN actor_capacity acap ON acap.actor = l.actor
    WHERE acap.max_concurrent IS NULL
       OR (acap.in_flight < acap.max_concurrent
           AND l.actor_rank <= acap.max_concurrent - acap.in_flight)
),
claimed AS (
    UPDATE {schema}.jobs j
    SET status = 'running', attempt = j.attempt + 1, locked_by_worker = $3::uuid,
        lock_expires_at = k.now + $4::interval, started_at = k.now, updated_at = k.now
    FROM eligible e CROSS JOIN clock k
    WHERE j.id = e.id AND j.status = 'pending'
    RETURNING j.*, e.mode_order AS dispatch_mode_order,
              e.fairness_rank AS dispatch_fairness_rank
),
events AS (
    INSERT INTO {schema}.job_events (job_id, kind, from_status, to_status, worker_id)
    SELECT c.id, 'state_change', 'pending', 'running', $3::uuid FROM claimed c
)
SELECT c.*
FROM claimed c
ORDER BY c.dispatch_mode_order, c.dispatch_fairness_rank, c.priority DESC, c.scheduled_at,
         c.id;
