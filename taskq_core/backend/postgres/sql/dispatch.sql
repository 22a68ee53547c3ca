-- Dispatch: claim due pending jobs for one worker in ONE atomic UPDATE ... RETURNING.
--
-- Parameters: $1 queues (text[], in the worker's order), $2 limit, $3 worker id, $4 lock
-- lease (interval), $5 oversample factor.
--
-- Commit: the claim's transaction runs with synchronous_commit off (set_config in `clock`,
-- local to it), so the one dispatcher of a worker never waits on a WAL flush. What a server
-- crash can lose is the last fraction of a second of claims: those jobs are pending again and
-- run again (at-least-once, as after any crash). A claim is never lost once its job's outcome
-- is durable: that write commits synchronously, which flushes the WAL before it, claim
-- included. Completions, failures and every operator write keep synchronous commits.
--
-- Shape (both queue modes in one statement, so a dispatch is one round trip):
--   queue_capacity   requested, unpaused queues: mode, mode-group order, residual room under
--                    queues.max_concurrent (running jobs of the queue counted only when capped)
--   capped_actors    actors with a max_concurrent and pending work in these queues: residual
--                    = max_concurrent - running (all queues), the boolean gate's inputs
--   rr_cohorts       loose index scan: the distinct fairness cohorts of each round_robin
--                    queue, one index probe per cohort however deep the backlog, stopping one
--                    past the budget of 128 cohorts
--   candidates       CROSS JOIN LATERAL windows in priority DESC, scheduled_at, id order:
--                    - actors without a cap share one window per strict_fifo queue (and per
--                      round_robin queue past the cohort budget) of residual * $5 rows, at
--                      least 16, so up to 16 dispatchers asking for one job each at the same
--                      moment each find an unlocked row in it; it merges the heads of the
--                      unkeyed jobs and of the keyed ones (two indexes, migration 0002);
--                    - in round_robin queues, one window per cohort instead (the whole
--                      residual * $5 while cohorts * window <= 256, else an even share:
--                      max(ceil(window / cohorts) + 1, 256 / cohorts) rows);
--                    - every capped actor gets a window of its own of ITS residual * $5 rows
--                      per queue, so its backlog can never crowd the others out of theirs.
--                    Oversampling absorbs what identity serialization and caps filter out.
--   fair_ranked      round_robin: fairness_rank = ROW_NUMBER() per cohort (NULL keys are the
--                    '__null__' cohort), and last_served = when a job of the cohort was last
--                    claimed in that queue (one index probe per cohort in the candidates);
--                    strict_fifo: 1 and NULL
--   identity_dedup   at most one job per (actor, identity_key), none if one is running
--   ranked           capped actors: actor_rank <= residual; then, in capped queues,
--                    queue_rank <= queue residual. Nothing else is pre-filtered: the global
--                    LIMIT below applies after SKIP LOCKED, so dispatchers racing for the same
--                    head rows fall through to the next ones instead of coming back empty.
--   locked           FOR UPDATE SKIP LOCKED, LIMIT $2, in dispatch order (mode group,
--                    fairness_rank, priority DESC, last_served NULLS FIRST, scheduled_at,
--                    id): among equals the cohort served least recently goes first, so a
--                    worker that dispatches one job at a time still alternates cohorts. FOR UPDATE cannot share
--                    a SELECT with window functions, hence its own CTE.
--   eligible         capped actors again over what was really locked: the boolean gate
--                    in_flight < max_concurrent and the rank cap actor_rank <= max - in_flight
--   claimed          UPDATE ... WHERE status = 'pending' (the final race guard). No event:
--                    the claim is on the row (claimed_at, the worker) until the attempt ends
--                    other than by success, when the settle writes it (settle.sql).
--                    A claim sets claimed_at and clears started_at: the worker writes
--                    started_at when the body starts (a prefetched job waits claimed).
--
-- Concurrent dispatchers each read the running counts of their own snapshot, so together
-- they can exceed a cap by at most (dispatchers - 1) * cap: a documented, bounded trade.
-- Cost per call is O(limit * oversample + capped actors + round_robin cohorts), never the
-- number of actors or the depth of the backlog. A round_robin queue with more than 128
-- cohorts degrades to the shared window ranked by cohort (no starvation, fairness inside
-- the window only), which keeps every call bounded.
--
-- `locked` and `claimed` find their rows by id among the candidates and test the status as
-- text (`j.status::text = 'pending'`, the same test): written `j.status = 'pending'`, it lets
-- the planner walk a whole pending index instead of probing the primary key, which it does
-- when the statistics say almost nothing is pending (the table was analyzed before a
-- workflow's release or a scheduled promotion made thousands of jobs due), and every claim
-- then reads the whole backlog (tests/postgres/test_workflow_plans.py).

-- The pieces both dispatch statements share word for word.

-- fragment: dispatch_clock
-- The claim's clock, and its asynchronous commit (see above).
clock AS (
    SELECT clock_timestamp() AS now,
           set_config('synchronous_commit', 'off', true) AS async_commit
)

-- fragment: claim_columns
-- What a claim writes on a job (`j`) at the clock's `k.now`: $3 worker, $4 lease.
status = 'running', attempt = j.attempt + 1, locked_by_worker = $3::uuid,
        lock_expires_at = k.now + $4::interval, claimed_at = k.now, started_at = NULL,
        updated_at = k.now

-- name: dispatch_batch
-- dispatch_plain below repeats this statement's window and identity CTEs for the common
-- case; tests/postgres/test_dispatch_statements.py holds the two copies together.
WITH RECURSIVE {fragment:dispatch_clock},
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
capped_actors AS (
    SELECT ac.actor, ac.max_concurrent, f.in_flight,
           LEAST($2::bigint, ac.max_concurrent - f.in_flight) AS residual
    FROM {schema}.actor_config ac
    CROSS JOIN LATERAL (
        SELECT count(*) AS in_flight
        FROM {schema}.jobs rj
        WHERE rj.status = 'running' AND rj.actor = ac.actor
    ) f
    CROSS JOIN LATERAL (
        -- One index probe per capped actor and requested queue. The ORDER BY follows
        -- jobs_dispatch_idx: without it the generic plan may pick a sequential scan that
        -- reads the whole backlog whenever the capped actor has nothing pending.
        SELECT 1
        FROM unnest($1::text[]) AS rq(queue)
        CROSS JOIN LATERAL (
            SELECT 1 FROM {schema}.jobs pj
            WHERE pj.status = 'pending' AND pj.actor = ac.actor AND pj.queue = rq.queue
            ORDER BY pj.priority DESC, pj.scheduled_at, pj.id
            LIMIT 1
        ) probe
        LIMIT 1
    ) has_pending
    WHERE ac.max_concurrent IS NOT NULL
),
capped AS (
    SELECT COALESCE(array_agg(ca.actor), '{}') AS actors FROM capped_actors ca
),
rr_cohorts AS (
    SELECT qc.queue, c.cohort, 1 AS n
    FROM queue_capacity qc
    CROSS JOIN LATERAL (
        SELECT COALESCE(j.fairness_key, '__null__') AS cohort
        FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.queue = qc.queue
        ORDER BY COALESCE(j.fairness_key, '__null__')
        LIMIT 1
    ) c
    WHERE qc.mode = 'round_robin' AND qc.residual > 0
    UNION ALL
    SELECT rc.queue, c.cohort, rc.n + 1
    FROM rr_cohorts rc
    CROSS JOIN LATERAL (
        SELECT COALESCE(j.fairness_key, '__null__') AS cohort
        FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.queue = rc.queue
          AND COALESCE(j.fairness_key, '__null__') > rc.cohort
        ORDER BY COALESCE(j.fairness_key, '__null__')
        LIMIT 1
    ) c
    WHERE rc.n <= 128
),
rr_queues AS (
    SELECT rc.queue, count(*) AS cohorts FROM rr_cohorts rc GROUP BY rc.queue
),
shared_windows AS (
    SELECT qc.queue, qc.mode, qc.mode_order, GREATEST(qc.residual * $5::bigint, 16) AS size
    FROM queue_capacity qc
    LEFT JOIN rr_queues rq ON rq.queue = qc.queue
    WHERE qc.residual > 0 AND (qc.mode = 'strict_fifo' OR rq.cohorts > 128)
),
candidates AS (
    SELECT c.*, sw.mode, sw.mode_order
    FROM shared_windows sw
    CROSS JOIN capped k
    CROSS JOIN LATERAL (
        -- The merge of two index heads: the jobs without a fairness key (the '__null__'
        -- cohort of jobs_fair_dispatch_idx) and the keyed ones (jobs_keyed_dispatch_idx).
        SELECT w.*
        FROM (
            (SELECT j.id, j.actor, j.queue, j.identity_key, j.priority, j.scheduled_at,
                    '__null__'::text AS cohort
             FROM {schema}.jobs j
             WHERE j.status = 'pending' AND j.queue = sw.queue
               AND COALESCE(j.fairness_key, '__null__') = '__null__'
               AND j.fairness_key IS NULL
               AND j.scheduled_at <= (SELECT now FROM clock)
               AND {schema}.actor_not_in(j.actor, k.actors)
             ORDER BY j.priority DESC, j.scheduled_at, j.id
             LIMIT sw.size)
            UNION ALL
            (SELECT j.id, j.actor, j.queue, j.identity_key, j.priority, j.scheduled_at,
                    j.fairness_key AS cohort
             FROM {schema}.jobs j
             WHERE j.status = 'pending' AND j.queue = sw.queue AND j.fairness_key IS NOT NULL
               AND j.scheduled_at <= (SELECT now FROM clock)
               AND {schema}.actor_not_in(j.actor, k.actors)
             ORDER BY j.priority DESC, j.scheduled_at, j.id
             LIMIT sw.size)
        ) w
        ORDER BY w.priority DESC, w.scheduled_at, w.id
        LIMIT sw.size
    ) c
    UNION ALL
    SELECT c.*, qc.mode, qc.mode_order
    FROM rr_cohorts rc
    JOIN rr_queues rq ON rq.queue = rc.queue AND rq.cohorts <= 128
    JOIN queue_capacity qc ON qc.queue = rc.queue
    CROSS JOIN capped k
    CROSS JOIN LATERAL (
        SELECT j.id, j.actor, j.queue, j.identity_key, j.priority, j.scheduled_at,
               COALESCE(j.fairness_key, '__null__') AS cohort
        FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.queue = rc.queue
          AND COALESCE(j.fairness_key, '__null__') = rc.cohort
          AND j.scheduled_at <= (SELECT now FROM clock)
          AND {schema}.actor_not_in(j.actor, k.actors)
        ORDER BY j.priority DESC, j.scheduled_at, j.id
        LIMIT CASE WHEN rq.cohorts * qc.residual * $5::bigint <= 256
                   THEN qc.residual * $5::bigint
                   ELSE GREATEST((qc.residual * $5::bigint + rq.cohorts - 1) / rq.cohorts + 1,
                                 256 / rq.cohorts)
              END
    ) c
    UNION ALL
    SELECT c.*, qc.mode, qc.mode_order
    FROM queue_capacity qc
    JOIN capped_actors ca ON ca.residual > 0
    CROSS JOIN LATERAL (
        SELECT j.id, j.actor, j.queue, j.identity_key, j.priority, j.scheduled_at,
               COALESCE(j.fairness_key, '__null__') AS cohort
        FROM {schema}.jobs j
        WHERE j.status = 'pending' AND j.actor = ca.actor AND j.queue = qc.queue
          AND j.scheduled_at <= (SELECT now FROM clock)
        ORDER BY j.priority DESC, j.scheduled_at, j.id
        LIMIT ca.residual * $5::bigint
    ) c
    WHERE qc.residual > 0
),
-- get_dispatch_position (admin.sql) reads these turns for one queue: keep the two alike.
cohort_turns AS (
    SELECT t.queue, t.cohort, s.last_started
    FROM (
        SELECT DISTINCT c.queue, c.cohort FROM candidates c WHERE c.mode = 'round_robin'
    ) t
    CROSS JOIN LATERAL (
        SELECT max(j.claimed_at) AS last_started
        FROM {schema}.jobs j
        WHERE j.queue = t.queue AND COALESCE(j.fairness_key, '__null__') = t.cohort
          AND j.claimed_at IS NOT NULL
    ) s
),
fair_ranked AS (
    SELECT c.*,
           CASE WHEN c.mode = 'round_robin'
                THEN row_number() OVER (
                    PARTITION BY c.mode, c.cohort
                    ORDER BY c.priority DESC, c.scheduled_at, c.id)
                ELSE 1
           END AS fairness_rank,
           ct.last_started AS last_served
    FROM candidates c
    LEFT JOIN cohort_turns ct ON ct.queue = c.queue AND ct.cohort = c.cohort
),
identity_free AS (
    SELECT f.*
    FROM fair_ranked f
    WHERE f.identity_key IS NULL
       OR NOT EXISTS (
           SELECT 1 FROM {schema}.jobs rj
           WHERE rj.status = 'running' AND rj.actor = f.actor
             AND rj.identity_key = f.identity_key)
),
identity_dedup AS (
    (
        SELECT DISTINCT ON (f.actor, f.identity_key) f.*
        FROM identity_free f
        WHERE f.identity_key IS NOT NULL
        ORDER BY f.actor, f.identity_key, f.mode_order, f.fairness_rank, f.priority DESC,
                 f.last_served NULLS FIRST, f.scheduled_at, f.id
    )
    UNION ALL
    SELECT f.* FROM identity_free f WHERE f.identity_key IS NULL
),
-- actor_ranked and ranked (and eligible below) number rows in the same dispatch order, on
-- purpose: each over its own partition (actor, queue) for its own cap.
actor_ranked AS (
    SELECT d.*,
           row_number() OVER (
               PARTITION BY d.actor
               ORDER BY d.mode_order, d.fairness_rank, d.priority DESC,
                        d.last_served NULLS FIRST, d.scheduled_at, d.id
           ) AS actor_rank
    FROM identity_dedup d
),
ranked AS (
    SELECT a.*,
           row_number() OVER (
               PARTITION BY a.queue
               ORDER BY a.mode_order, a.fairness_rank, a.priority DESC,
                        a.last_served NULLS FIRST, a.scheduled_at, a.id
           ) AS queue_rank
    FROM actor_ranked a
    LEFT JOIN capped_actors ca ON ca.actor = a.actor
    WHERE ca.actor IS NULL OR a.actor_rank <= ca.residual
),
locked AS (
    SELECT j.id, r.actor, r.mode_order, r.fairness_rank, r.priority, r.last_served,
           r.scheduled_at
    FROM {schema}.jobs j
    JOIN ranked r ON r.id = j.id
    JOIN queue_capacity qc ON qc.queue = r.queue
    WHERE j.status::text = 'pending'
      AND (qc.max_concurrent IS NULL OR r.queue_rank <= qc.residual)
    ORDER BY r.mode_order, r.fairness_rank, r.priority DESC, r.last_served NULLS FIRST,
             r.scheduled_at, r.id
    LIMIT $2::bigint
    FOR UPDATE OF j SKIP LOCKED
),
eligible AS (
    SELECT l.id, l.mode_order, l.fairness_rank, l.last_served
    FROM (
        SELECT l.*,
               row_number() OVER (
                   PARTITION BY l.actor
                   ORDER BY l.mode_order, l.fairness_rank, l.priority DESC,
                            l.last_served NULLS FIRST, l.scheduled_at, l.id
               ) AS actor_rank
        FROM locked l
    ) l
    LEFT JOIN capped_actors ca ON ca.actor = l.actor
    WHERE ca.actor IS NULL
       OR (ca.in_flight < ca.max_concurrent
           AND l.actor_rank <= ca.max_concurrent - ca.in_flight)
),
claimed AS (
    UPDATE {schema}.jobs j
    SET {fragment:claim_columns}
    FROM eligible e CROSS JOIN clock k
    WHERE j.id = e.id AND j.status::text = 'pending'
    RETURNING j.*, e.mode_order AS dispatch_mode_order,
              e.fairness_rank AS dispatch_fairness_rank, e.last_served AS dispatch_last_served
)
SELECT c.*
FROM claimed c
ORDER BY c.dispatch_mode_order, c.dispatch_fairness_rank, c.priority DESC,
         c.dispatch_last_served NULLS FIRST, c.scheduled_at, c.id;

-- name: dispatch_plain
-- `dispatch_batch` for the common case in about two thirds of its time: every requested
-- queue is strict_fifo without a queue cap, and no actor has a cap. Same parameters, same
-- claims, same order (priority DESC, scheduled_at, id across the requested, unpaused
-- queues), same identity serialization, same asynchronous commit. It checks
-- that case in its own snapshot, on every call, and claims nothing outside it; the caller
-- then runs `dispatch_batch`, which handles everything (PostgresBackend.dispatch_batch).
-- Its window and identity CTEs repeat dispatch_batch's: change both together;
-- tests/postgres/test_dispatch_statements.py runs both on one snapshot and compares claims.
WITH {fragment:dispatch_clock},
plain AS (
    SELECT NOT EXISTS (
               SELECT 1 FROM {schema}.actor_config ac WHERE ac.max_concurrent IS NOT NULL)
       AND NOT EXISTS (
               SELECT 1 FROM {schema}.queues q
               WHERE q.name = ANY ($1::text[])
                 AND (q.mode <> 'strict_fifo' OR q.max_concurrent IS NOT NULL)) AS ok
),
requested AS (
    SELECT DISTINCT r.name AS queue
    FROM unnest($1::text[]) AS r(name)
    LEFT JOIN {schema}.queues q ON q.name = r.name
    WHERE NOT COALESCE(q.paused, false) AND (SELECT ok FROM plain)
),
candidates AS (
    SELECT c.*
    FROM requested rq
    CROSS JOIN LATERAL (
        -- As in dispatch_batch: the merge of the unkeyed and the keyed heads of the queue.
        SELECT w.*
        FROM (
            (SELECT j.id, j.actor, j.identity_key, j.priority, j.scheduled_at
             FROM {schema}.jobs j
             WHERE j.status = 'pending' AND j.queue = rq.queue
               AND COALESCE(j.fairness_key, '__null__') = '__null__'
               AND j.fairness_key IS NULL
               AND j.scheduled_at <= (SELECT now FROM clock)
             ORDER BY j.priority DESC, j.scheduled_at, j.id
             LIMIT GREATEST($2::bigint * $5::bigint, 16))
            UNION ALL
            (SELECT j.id, j.actor, j.identity_key, j.priority, j.scheduled_at
             FROM {schema}.jobs j
             WHERE j.status = 'pending' AND j.queue = rq.queue AND j.fairness_key IS NOT NULL
               AND j.scheduled_at <= (SELECT now FROM clock)
             ORDER BY j.priority DESC, j.scheduled_at, j.id
             LIMIT GREATEST($2::bigint * $5::bigint, 16))
        ) w
        ORDER BY w.priority DESC, w.scheduled_at, w.id
        LIMIT GREATEST($2::bigint * $5::bigint, 16)
    ) c
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
        ORDER BY f.actor, f.identity_key, f.priority DESC, f.scheduled_at, f.id
    )
    UNION ALL
    SELECT f.* FROM identity_free f WHERE f.identity_key IS NULL
),
locked AS (
    SELECT j.id
    FROM {schema}.jobs j
    JOIN identity_dedup d ON d.id = j.id
    WHERE j.status::text = 'pending'
    ORDER BY d.priority DESC, d.scheduled_at, d.id
    LIMIT $2::bigint
    FOR UPDATE OF j SKIP LOCKED
),
claimed AS (
    UPDATE {schema}.jobs j
    SET {fragment:claim_columns}
    FROM locked l CROSS JOIN clock k
    WHERE j.id = l.id AND j.status::text = 'pending'
    RETURNING j.*
)
-- One row per claim, or one row of NULLs when nothing was claimed: `plain` is false when
-- this statement did not apply and the caller must run dispatch_batch.
SELECT c.*, p.ok AS plain
FROM plain p
LEFT JOIN claimed c ON true
ORDER BY c.priority DESC, c.scheduled_at, c.id;
