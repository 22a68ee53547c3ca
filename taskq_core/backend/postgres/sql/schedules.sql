-- Cron schedules: the rows the operator and the code write, and the leader's fire.
--
-- Fire times are cron arithmetic, done in Python (taskq_core.schedule) on the database
-- clock: a write reads clock_timestamp() in its transaction (schedule_clock, or the pick of
-- fire_due_pick), computes, and writes in the same transaction. Each fire time makes one job
-- whose unique_key names it (jobs_unique_key_idx, held in every state): a second leader's
-- insert for the same fire time is refused by the index, not by a read.

-- name: schedule_clock
-- The database clock, read inside the transaction that writes a schedule's next fire time.
SELECT clock_timestamp() AS now;

-- name: get_schedule
SELECT * FROM {schema}.schedules WHERE name = $1::text;

-- name: lock_schedule
-- One schedule, locked for an update computed from its current values.
SELECT * FROM {schema}.schedules WHERE name = $1::text FOR UPDATE;

-- name: list_schedules
-- By name; $1 actor and $2 enabled filter when not NULL.
SELECT * FROM {schema}.schedules
WHERE ($1::text IS NULL OR actor = $1::text) AND ($2::boolean IS NULL OR enabled = $2::boolean)
ORDER BY name;

-- name: insert_schedule
-- A new schedule; no row back when the name is taken.
INSERT INTO {schema}.schedules (
    id, name, actor, queue, cron, timezone, payload, enabled, next_fire_at, declared_in_code,
    created_at, updated_at
)
VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::text, $6::text, $7::jsonb, $8::boolean,
        $9::timestamptz, $10::boolean, $11::timestamptz, $11::timestamptz)
ON CONFLICT (name) DO NOTHING
RETURNING *;

-- name: write_schedule
-- Every writable column of one schedule (the caller computed the row after the change).
UPDATE {schema}.schedules
SET actor = $2::text, queue = $3::text, cron = $4::text, timezone = $5::text,
    payload = $6::jsonb, enabled = $7::boolean, next_fire_at = $8::timestamptz,
    updated_at = $9::timestamptz
WHERE id = $1::uuid
RETURNING *;

-- name: delete_schedule
DELETE FROM {schema}.schedules WHERE name = $1::text RETURNING *;

-- name: lock_code_schedules
-- A worker start's upsert: the rows of the declared names ($1) and every row declared in
-- code before (to report the orphaned ones), locked until the upsert commits.
SELECT * FROM {schema}.schedules
WHERE name = ANY ($1::text[]) OR declared_in_code
ORDER BY name
FOR UPDATE;

-- name: upsert_code_schedules
-- The rows a worker start writes, one array per column (JSON as text); $10 the clock of
-- the transaction.
-- A name created meanwhile by someone else (another worker's start) takes the code's row.
INSERT INTO {schema}.schedules (
    id, name, actor, queue, cron, timezone, payload, enabled, next_fire_at, declared_in_code,
    created_at, updated_at
)
SELECT w.id, w.name, w.actor, w.queue, w.cron, w.timezone, w.payload::jsonb, w.enabled,
       w.next_fire_at, true, $10::timestamptz, $10::timestamptz
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
            $7::text[], $8::boolean[], $9::timestamptz[])
     AS w(id, name, actor, queue, cron, timezone, payload, enabled, next_fire_at)
ORDER BY w.name
ON CONFLICT (name) DO UPDATE
SET actor = EXCLUDED.actor, queue = EXCLUDED.queue, cron = EXCLUDED.cron,
    timezone = EXCLUDED.timezone, payload = EXCLUDED.payload, enabled = EXCLUDED.enabled,
    next_fire_at = EXCLUDED.next_fire_at, declared_in_code = true,
    updated_at = EXCLUDED.updated_at;

-- name: fire_due_pick
-- The leader's tick, first statement of its transaction: the clock, read once (always one
-- row, with NULL columns when nothing is due), and up to $1 due schedules, earliest first,
-- locked. Rows another tick holds are skipped: that tick fires them. The clock reaches the
-- scan as the lateral's parameter, so the pick walks schedules_due_idx (next_fire_at,
-- enabled only) up to now and reads the due rows only, however many schedules exist.
WITH k AS MATERIALIZED (
    SELECT clock_timestamp() AS now
)
SELECT k.now, d.id, d.name, d.cron, d.timezone, d.next_fire_at
FROM k
LEFT JOIN LATERAL (
    SELECT s.id, s.name, s.cron, s.timezone, s.next_fire_at
    FROM {schema}.schedules s
    WHERE s.enabled AND s.next_fire_at <= k.now
    ORDER BY s.next_fire_at
    LIMIT $1::integer
    FOR UPDATE SKIP LOCKED
) d ON true;

-- name: fire_schedules
-- The tick's second statement: one job per picked schedule and the schedules moved on.
-- Arrays, one entry per schedule: $1 schedule ids, $2 new job ids, $3 fire times, $4 next
-- fire times, $5 the jobs' unique keys, $6 their metadata (JSON text); $7 the tick's clock.
-- A job takes the schedule's actor and payload, the schedule's queue or else the actor's
-- stored one, and the actor's stored retry policy and priority (an indefinite policy's
-- budget is its deadline); an actor no worker has registered gets $8 queue, $9 retry kind
-- and $10 attempts (the client's defaults for a by-name enqueue). unique_until is the fire
-- time: the key is held in every state, so a fire time whose job exists (another leader's
-- tick) inserts nothing (ON CONFLICT on jobs_unique_key_idx) and its schedule records no
-- job. $11: the wake channel, notified when a job was inserted.
WITH fired AS (
    SELECT f.schedule_id, f.job_id, f.fire_at, f.next_fire_at, f.unique_key, f.metadata
    FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[], $4::timestamptz[], $5::text[],
                $6::text[])
         AS f(schedule_id, job_id, fire_at, next_fire_at, unique_key, metadata)
),
source AS (
    SELECT f.job_id, f.fire_at, f.unique_key, f.metadata, s.actor, s.payload,
           COALESCE(s.queue, ac.queue, $8::text) AS queue,
           COALESCE(ac.priority, 0) AS priority,
           -- A stored policy needs both columns, as actor_config.stored_retry reads it.
           (ac.retry_kind IS NOT NULL AND ac.max_attempts IS NOT NULL) AS has_policy,
           ac.retry_kind, ac.max_attempts, ac.retry_time_budget
    FROM fired f
    JOIN {schema}.schedules s ON s.id = f.schedule_id
    LEFT JOIN {schema}.actor_config ac ON ac.actor = s.actor
),
inserted AS (
    INSERT INTO {schema}.jobs (
        id, actor, queue, payload, status, priority, scheduled_at, created_at, updated_at,
        schedule_to_close, retry_kind, max_attempts, metadata, unique_key, unique_until
    )
    SELECT c.job_id, c.actor, c.queue, c.payload, 'pending'::{schema}.job_status,
           c.priority, $7::timestamptz, $7::timestamptz, $7::timestamptz,
           CASE WHEN c.has_policy AND c.retry_kind = 'indefinite'
                THEN $7::timestamptz + c.retry_time_budget END,
           CASE WHEN c.has_policy THEN c.retry_kind ELSE $9::text END,
           CASE WHEN c.has_policy THEN c.max_attempts ELSE $10::integer END,
           c.metadata::jsonb, c.unique_key, c.fire_at
    FROM source c
    ORDER BY c.job_id
    ON CONFLICT DO NOTHING
    RETURNING id
),
moved AS (
    UPDATE {schema}.schedules s
    SET next_fire_at = f.next_fire_at, last_fired_at = f.fire_at, last_job_id = i.id,
        updated_at = $7::timestamptz
    FROM fired f
    LEFT JOIN inserted i ON i.id = f.job_id
    WHERE s.id = f.schedule_id
),
woken AS (
    SELECT pg_notify($11::text, '') WHERE EXISTS (SELECT 1 FROM inserted)
)
SELECT f.schedule_id, i.id AS job_id, (SELECT count(*) FROM woken) AS woken
FROM fired f
LEFT JOIN inserted i ON i.id = f.job_id;
