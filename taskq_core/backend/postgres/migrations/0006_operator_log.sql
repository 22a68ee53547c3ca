-- The operator log: who (OS user@host), when (the database clock), why and what, for the
-- operator writes that no job event can record: a purge deletes the jobs and their events,
-- and an actor-config change touches no job. Writes to jobs (cancel, retry, requeue, fail,
-- move) record who and why in their own job_events rows instead.
-- A new, empty table: instant on any database.

CREATE TABLE {schema}.operator_log (
    id          bigserial PRIMARY KEY,
    occurred_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    action      text NOT NULL,
    target      text,
    by_operator text,
    reason      text,
    detail      jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX operator_log_target_idx ON {schema}.operator_log (target, id);
