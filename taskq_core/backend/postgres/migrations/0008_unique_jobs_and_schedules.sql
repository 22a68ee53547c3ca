-- Unique jobs and cron schedules.
--
-- jobs.unique_key: the uniqueness a caller asked for, as stored (a windowed key carries the
-- start of its window, `key@2026-12-02T10:00:00Z`; a schedule's job carries its fire time,
-- `schedule:NAME@FIRE_TIME`). unique_until NULL: the key is held while the job is waiting or
-- running and free again once it ends; set: held in every state (the end of its window, or
-- the fire time), so a finished job still refuses a second one of its window. The database
-- refuses the duplicate through the unique index below (INSERT ... ON CONFLICT), never a
-- read-then-insert race. Nullable columns without defaults: instant on any table size.
ALTER TABLE {schema}.jobs
    ADD COLUMN unique_key text,
    ADD COLUMN unique_until timestamptz;
ALTER TABLE {schema}.jobs_archive
    ADD COLUMN unique_key text,
    ADD COLUMN unique_until timestamptz;

CREATE UNIQUE INDEX jobs_unique_key_idx ON {schema}.jobs (unique_key)
    WHERE unique_key IS NOT NULL
      AND (unique_until IS NOT NULL OR status IN ('pending', 'scheduled', 'running'));

-- declared_in_code: upserted by worker starts from `@cron` (the code owns the expression,
-- zone, payload, queue and actor; the operator owns `enabled`). A schedule made with the
-- client or the CLI is false and lives only in the database.
-- last_job_id: the job the last fire created (NULL when that fire time had its job already).
ALTER TABLE {schema}.schedules
    ADD COLUMN declared_in_code boolean NOT NULL DEFAULT false,
    ADD COLUMN last_job_id uuid;
