-- Retention: the prune moves old terminal jobs to the archive, the archive expiry removes
-- archived jobs once the range of days holding their expire_at has ended ("The archive in
-- time partitions" below), and the archived reads, which stop at expire_at.
--
-- Each batch is one statement in its own transaction: the caller loops, so a prune of
-- millions of rows never holds a long transaction. Rows are picked FOR UPDATE SKIP LOCKED:
-- two prunes at once move each row once, and a row another session is writing is left to
-- the next pass. Dispatch only touches pending rows and is never blocked. Column lists are
-- explicit: the archive tables were built LIKE the live ones and must stay in step by name.

-- Workflows. A job that carries metadata.workflow_id is a step to the prune (as it is to the
-- workflow's reads and its end), and never moves alone: while its workflow runs, whatever
-- the step's own age, nothing of it moves; once the workflow has ended, it moves whole
-- (every step in one batch, then its row and, by ON DELETE CASCADE, its edges), so no reader
-- ever finds half of a workflow in `jobs` and half in the archive. An archived workflow keeps
-- no row: its steps in the archive still carry workflow_id and workflow_step, and
-- get_workflow answers None. A stray (a workflow_id naming no workflow row: set by hand, or
-- naming one archived already) is pruned as any job.
--
-- The cutoff rule, per workflow: an ended workflow is due when every step is still in `jobs`
-- with a status the policy prunes (and in its queue, when one is set) and the workflow's end
-- (its finished_at, or the later finished_at of a step retried on its own after it ended) is
-- older than the longest retention the policy gives the statuses its steps ended in. So no
-- step leaves sooner than it would alone, the steps that could have gone earlier wait for the
-- last, and a prune narrowed by status or queue never moves a job outside what it asked for
-- (a workflow with such a step stays whole until a wider prune).
--
-- The cost to jobs outside workflows is the key test on the rows the pick walks. Steps held
-- back (of running workflows, or of ended ones not due yet) lie in that walk, oldest first,
-- and each batch steps over them again at the key test's price (about a microsecond a row).
-- Due workflows are looked for only in the room a batch has left, and strays in the room
-- still left after them: a run pays the strays' dearer test (a probe a step) in its last
-- batch, not in each.

-- fragment: stray_step
-- Whether job `j`, which carries the workflow_id key, names no row of `workflows`: the
-- workflow is looked up by primary key; a value that is not a uuid's text names none (and
-- is not cast).
NOT EXISTS (
    SELECT 1 FROM {schema}.workflows w
    WHERE w.id = CASE
        WHEN j.metadata->>'workflow_id'
             ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
        THEN (j.metadata->>'workflow_id')::uuid END)

-- fragment: prune_rules
-- The prune's clock `k` (one reading) and its `rules`: $1 statuses with $2 their retentions,
-- each status's cutoff on that clock. The batch and its dry run read the same rules.
k AS (
    SELECT clock_timestamp() AS now
),
rules AS (
    SELECT r.status::{schema}.job_status AS status, r.keep, k.now - r.keep AS cutoff
    FROM unnest($1::text[], $2::interval[]) AS r (status, keep) CROSS JOIN k
)

-- fragment: due_by_rule
-- Whether job `j` is due by rule `r` (its status, finished before the cutoff) and in the
-- pruned queue ($3; NULL: every queue). Every walk of jobs_finished_idx per rule tests it.
j.status = r.status AND j.finished_at < r.cutoff
    AND ($3::text IS NULL OR j.queue = $3::text)

-- fragment: due_workflows
-- The ended workflows due by the rule above (needs the CTEs `k`, the clock, and `rules`,
-- $1/$2 as rows of status, keep and cutoff; $3 the queue), oldest end first: the walk of
-- workflows_finished_idx stops at the shortest retention's cutoff (no workflow is due sooner),
-- and each workflow's steps are one probe of jobs_workflow_idx. `steps` counts them all, of
-- every status, for the batch's check that it holds each one.
SELECT w.id, w.finished_at, s.steps
FROM {schema}.workflows w
CROSS JOIN k
CROSS JOIN LATERAL (
    SELECT count(*) AS steps,
           bool_and(r.status IS NOT NULL AND ($3::text IS NULL OR j.queue = $3::text))
               AS prunable,
           max(j.finished_at) AS last_end,
           max(r.keep) AS keep
    FROM {schema}.jobs j
    LEFT JOIN rules r ON r.status = j.status
    WHERE j.metadata ? 'workflow_id' AND j.metadata->>'workflow_id' = w.id::text
) s
WHERE w.status <> 'running'
  AND w.finished_at < (SELECT max(r.cutoff) FROM rules r)
  AND coalesce(s.prunable, true)
  AND greatest(w.finished_at, s.last_end) < k.now - coalesce(s.keep, interval '0')
ORDER BY w.finished_at, w.id

-- name: prune_jobs_batch
-- $1 statuses (text[]), $2 their retentions (interval[], parallel to $1), $3 queue (NULL:
-- every queue), $4 batch size, $5 archive_for. One clock reading stamps the whole batch.
-- The pick of jobs outside workflows walks jobs_finished_idx (status, finished_at DESC) once
-- per status, oldest first: the order is what keeps the planner on the index whatever share
-- of the table is due. The room they leave goes to due workflows, oldest end first, each
-- whole: one is taken while the steps before it fill less than the room, so a workflow
-- larger than a batch moves alone in a batch of its own. A workflow is held (its row locked,
-- then each of its steps, SKIP LOCKED, re-read as committed: still of a pruned status) and
-- moves only if every step is held; one that another session writes (a retry, a graft, a
-- second prune) stays, whole, for the next pass. The room still left goes to strays, by the
-- pick's walk. With no room left, neither is looked for.
WITH {fragment:prune_rules},
plain AS (
    SELECT p.id
    FROM rules r
    CROSS JOIN LATERAL (
        SELECT j.id
        FROM {schema}.jobs j
        WHERE {fragment:due_by_rule}
            AND NOT (j.metadata ? 'workflow_id')
        ORDER BY j.finished_at
        LIMIT $4
        FOR UPDATE SKIP LOCKED
    ) p
    LIMIT $4
),
room AS (
    SELECT $4 - count(*) AS room FROM plain
),
due AS (
    {fragment:due_workflows}
    LIMIT (SELECT greatest(room.room, 0) FROM room)
),
budgeted AS (
    SELECT d.id, d.steps
    FROM (
        SELECT d.id, d.steps,
               sum(d.steps) OVER (ORDER BY d.finished_at, d.id) - d.steps AS before
        FROM due d
    ) d
    WHERE d.before < (SELECT room.room FROM room)
),
held AS (
    -- The room test is a one-time filter: a batch the pick filled reads no workflow at all.
    SELECT w.id
    FROM {schema}.workflows w
    WHERE (SELECT room.room FROM room) > 0
        AND w.id = ANY (ARRAY(SELECT b.id FROM budgeted b)) AND w.status <> 'running'
    FOR UPDATE SKIP LOCKED
),
steps AS (
    SELECT j.id, j.metadata->>'workflow_id' AS workflow_id
    FROM {schema}.jobs j
    WHERE (SELECT room.room FROM room) > 0 AND j.metadata ? 'workflow_id'
        AND j.metadata->>'workflow_id' = ANY (ARRAY(SELECT h.id::text FROM held h))
        AND j.status = ANY ($1::text[]::{schema}.job_status[])
        AND ($3::text IS NULL OR j.queue = $3::text)
    FOR UPDATE SKIP LOCKED
),
whole AS (
    -- Each workflow's steps counted once (a stepless one, its steps purged, has none).
    SELECT b.id, b.steps
    FROM budgeted b
    JOIN held h ON h.id = b.id
    LEFT JOIN (
        SELECT s.workflow_id, count(*) AS steps FROM steps s GROUP BY s.workflow_id
    ) c ON c.workflow_id = b.id::text
    WHERE coalesce(c.steps, 0) = b.steps
),
-- The strays' walk is plain's on purpose (one walk per rule keeps the index order); the
-- filter and the room differ.
strays AS (
    SELECT p.id
    FROM rules r
    CROSS JOIN LATERAL (
        SELECT j.id
        FROM {schema}.jobs j
        WHERE {fragment:due_by_rule}
            AND j.metadata ? 'workflow_id' AND {fragment:stray_step}
        ORDER BY j.finished_at
        LIMIT $4
        FOR UPDATE SKIP LOCKED
    ) p
    LIMIT (SELECT greatest(room.room - (SELECT coalesce(sum(w.steps), 0) FROM whole w), 0)
           FROM room)
),
picked AS (
    SELECT p.id FROM plain p
    UNION ALL
    SELECT s.id FROM steps s WHERE s.workflow_id IN (SELECT w.id::text FROM whole w)
    UNION ALL
    SELECT s.id FROM strays s
),
ended_workflows AS (
    -- Their edges go by the foreign key's ON DELETE CASCADE.
    DELETE FROM {schema}.workflows w
    WHERE (SELECT room.room FROM room) > 0 AND w.id = ANY (ARRAY(SELECT h.id FROM whole h))
),
attempts AS (
    DELETE FROM {schema}.job_attempts a
    USING picked p
    WHERE a.job_id = p.id
    RETURNING a.id, a.job_id, a.attempt, a.worker_id, a.outcome, a.started_at, a.finished_at,
        a.duration_ms, a.error_class, a.error_message, a.error_traceback
),
events AS (
    DELETE FROM {schema}.job_events e USING picked p WHERE e.job_id = p.id
),
moved AS (
    DELETE FROM {schema}.jobs j
    USING picked p
    WHERE j.id = p.id
    RETURNING j.id, j.actor, j.queue, j.payload, j.status, j.priority, j.scheduled_at,
        j.created_at, j.retry_kind, j.max_attempts, j.attempt, j.locked_by_worker,
        j.lock_expires_at, j.claimed_at, j.started_at, j.finished_at, j.cancel_phase,
        j.cancel_requested_at, j.cancel_reason, j.identity_key, j.fairness_key,
        j.schedule_to_close, j.result, j.result_ttl, j.result_expires_at, j.error_class,
        j.error_message, j.error_traceback, j.metadata, j.trace_id, j.span_id, j.progress_seq,
        j.progress_state, j.updated_at, j.unique_key, j.unique_until, j.unstarted_reclaims,
        j.uncounted_attempts
),
archived AS (
    INSERT INTO {schema}.jobs_archive (
        id, actor, queue, payload, status, priority, scheduled_at, created_at, retry_kind,
        max_attempts, attempt, locked_by_worker, lock_expires_at, claimed_at, started_at,
        finished_at, cancel_phase, cancel_requested_at, cancel_reason, identity_key,
        fairness_key, schedule_to_close, result, result_ttl, result_expires_at, error_class,
        error_message, error_traceback, metadata, trace_id, span_id, progress_seq,
        progress_state, updated_at, unique_key, unique_until, unstarted_reclaims,
        uncounted_attempts, archived_at, expire_at
    )
    -- `moved` returns the columns in this list's order: its rows, then the archive's two.
    SELECT m.*, k.now, k.now + $5::interval
    FROM moved m CROSS JOIN k
),
counted AS (
    -- The batch's count added to its partition's, for the expiry's report when it drops it
    -- (no row when the jobs went to the default partition: its batches count what they
    -- delete).
    UPDATE {schema}.archive_partitions p
    SET jobs = p.jobs + c.jobs
    FROM (
        SELECT ((k.now + $5::interval) AT TIME ZONE 'UTC')::date AS day, count(*) AS jobs
        FROM moved m CROSS JOIN k
        GROUP BY 1
    ) c
    WHERE p.starts <= c.day AND c.day < p.ends
),
archived_attempts AS (
    -- With their job's expire_at: in their job's partition, dropped with it.
    INSERT INTO {schema}.job_attempts_archive (
        id, job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms,
        error_class, error_message, error_traceback, expire_at
    )
    SELECT a.id, a.job_id, a.attempt, a.worker_id, a.outcome, a.started_at, a.finished_at,
        a.duration_ms, a.error_class, a.error_message, a.error_traceback,
        k.now + $5::interval
    FROM attempts a CROSS JOIN k
)
SELECT m.status::text AS status, m.queue, count(*) AS count
FROM moved m
GROUP BY m.status, m.queue;

-- name: prune_jobs_count
-- The dry run: what prune_jobs_batch would move, all batches together. Same parameters as
-- prune_jobs_batch ($1 statuses, $2 retentions, $3 queue); nothing is locked or moved.
-- Grouped inside the lateral, so each status is its own walk of jobs_finished_idx
-- (status, finished_at) up to its cutoff, as the batch's pick is: the count reads the due
-- rows only, never the whole table. The steps of every due workflow are added, by status
-- and queue.
WITH {fragment:prune_rules},
due AS (
    {fragment:due_workflows}
),
counted AS (
    SELECT r.status, d.queue, d.count
    FROM rules r
    CROSS JOIN LATERAL (
        SELECT j.queue, count(*) AS count
        FROM {schema}.jobs j
        WHERE {fragment:due_by_rule}
            AND (NOT (j.metadata ? 'workflow_id') OR {fragment:stray_step})
        GROUP BY j.queue
    ) d
    UNION ALL
    SELECT j.status, j.queue, count(*) AS count
    FROM {schema}.jobs j
    WHERE j.metadata ? 'workflow_id'
        AND j.metadata->>'workflow_id' = ANY (ARRAY(SELECT d.id::text FROM due d))
    GROUP BY j.status, j.queue
)
SELECT c.status::text AS status, c.queue, sum(c.count)::bigint AS count
FROM counted c
GROUP BY c.status, c.queue;

-- The archive in time partitions. jobs_archive and job_attempts_archive are partitioned by
-- range of expire_at, each range a few UTC days (`jobs_archive_YYYYMMDD` and
-- `job_attempts_archive_YYYYMMDD`, named by their first day; the registry
-- archive_partitions holds each range and its count of jobs), made together by the prune
-- ahead of the days its jobs expire on (archive_partitions.py), plus a default partition
-- each for rows no range holds (those archived before 0021, or while their range could not
-- be made).
-- The expiry drops a range's two partitions once it has ended, and deletes the default's
-- rows of ended days in batches. Reads stop at expire_at, so a row kept until its range
-- ends is never read after it.

-- name: archive_target_day
-- The UTC day the jobs a prune archives now, for $1, expire on.
SELECT ((clock_timestamp() + $1::interval) AT TIME ZONE 'UTC')::date;

-- name: archive_partitions_list
-- Every partition range, oldest first. Read with the statement's snapshot (a plain table),
-- so it sees the ranges another session has just made.
SELECT p.starts, p.ends FROM {schema}.archive_partitions p ORDER BY p.starts;

-- name: archive_partition_add
-- Register the range [$1, $2) holding $3 jobs (those its creation moved in).
INSERT INTO {schema}.archive_partitions (starts, ends, jobs) VALUES ($1, $2, $3);

-- name: archive_partitions_ended
-- The ranges whose partitions the expiry drops: those ending by today (UTC), oldest first.
SELECT p.starts FROM {schema}.archive_partitions p
WHERE p.ends <= (clock_timestamp() AT TIME ZONE 'UTC')::date
ORDER BY p.starts;

-- name: archive_partition_forget
-- Unregister the range starting $1 and return its count of jobs (0 when none): in the
-- transaction that drops its partitions.
WITH gone AS (
    DELETE FROM {schema}.archive_partitions p WHERE p.starts = $1::date RETURNING p.jobs
)
SELECT coalesce(sum(g.jobs), 0)::bigint FROM gone g;

-- name: set_local_lock_timeout
-- Bound the waits for locks of the rest of this transaction ($1: a duration, '5s'): the
-- partition changes queue behind a long read of the archive, and the archive's readers
-- behind them, so they give up instead and run again at the next pass.
SELECT set_config('lock_timeout', $1::text, true);

-- name: archive_partitions_lock
-- One maker of partitions at a time per schema (a transaction lock).
SELECT pg_advisory_xact_lock(hashtextextended('taskq:archive_partitions:{schema}', 0));

-- name: expire_archive_batch
-- Up to $1 rows of the default partition whose UTC day of expire_at has ended, oldest first
-- (the order keeps the pick on jobs_archive_expire_idx), deleted with their attempts (the
-- default's too: an attempt carries its job's expire_at, or NULL when archived before 0021).
-- The clock is read once, in `k`, so it bounds the index scan instead of filtering each row.
-- The deletes take the picked ids as one array, so they find them on an index: joined to
-- the CTE instead, the generic plan hashed the whole archive to delete a batch.
WITH k AS (
    SELECT date_trunc('day', clock_timestamp() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS today
),
doomed AS (
    SELECT a.id
    FROM {schema}.jobs_archive_default a
    WHERE a.expire_at < (SELECT k.today FROM k)
    ORDER BY a.expire_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
attempts AS (
    DELETE FROM {schema}.job_attempts_archive_default a
    WHERE a.job_id = ANY (ARRAY(SELECT d.id FROM doomed d))
),
gone AS (
    DELETE FROM {schema}.jobs_archive_default a
    WHERE a.id = ANY (ARRAY(SELECT d.id FROM doomed d))
    RETURNING a.id
)
SELECT count(*) FROM gone;

-- name: sweep_lock_try
-- A sweep's cluster-wide lock ($1 = the key, namespaced per schema): a session advisory lock
-- on the connection the caller keeps for the sweep's body; it dies with that session.
SELECT pg_try_advisory_lock(hashtextextended($1::text, 0));

-- name: sweep_lock_release
SELECT pg_advisory_unlock(hashtextextended($1::text, 0));

-- name: get_archived_job
SELECT id, actor, queue, payload, status, priority, scheduled_at, created_at, retry_kind,
    max_attempts, attempt, locked_by_worker, lock_expires_at, claimed_at, started_at,
    finished_at, cancel_phase, cancel_requested_at, cancel_reason, identity_key, fairness_key,
    schedule_to_close, result, result_ttl, result_expires_at, error_class, error_message,
    error_traceback, metadata, trace_id, span_id, progress_seq, progress_state, updated_at,
    unique_key, unique_until, unstarted_reclaims, uncounted_attempts, archived_at, expire_at
FROM {schema}.jobs_archive
WHERE id = $1::uuid AND expire_at >= clock_timestamp();

-- name: get_archived_attempts
-- The archived attempt rows, then the success's read from the archived job row (id 0), as
-- get_attempts does; none once the job is past its expire_at.
WITH job AS (
    SELECT j.* FROM {schema}.jobs_archive j
    WHERE j.id = $1::uuid AND j.expire_at >= clock_timestamp()
)
SELECT id, job_id, attempt, worker_id, outcome, started_at, finished_at, duration_ms,
    error_class, error_message, error_traceback
FROM (
    SELECT {fragment:attempt_columns}, false AS from_row
    FROM {schema}.job_attempts_archive a
    WHERE a.job_id = $1::uuid AND EXISTS (SELECT 1 FROM job)
    UNION ALL
    SELECT {fragment:success_attempt}, true
    FROM job j
    WHERE j.status = 'succeeded'
      AND NOT EXISTS (SELECT 1 FROM {schema}.job_attempts_archive a
                      WHERE a.job_id = j.id AND a.outcome = 'succeeded')
) x
ORDER BY from_row, id;
