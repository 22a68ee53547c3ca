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
DELETE FROM {schema}.schedules WHERE name = $1::text RETURNING id;

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
