-- A job claimed ahead of a free consumer is told apart from one whose body runs.
--
-- Dispatch now sets claimed_at (and leaves started_at NULL); the worker writes started_at
-- when the actor's body starts. A running row with started_at NULL is claimed, not started:
-- the reclaim sweep, a shutdown drain and a worker that gives its jobs up send it back to
-- pending without using an attempt. Round_robin's "cohort served least recently" follows
-- claims, so its index moves from started_at to claimed_at.
--
-- No backfill: rows finished before this migration keep claimed_at NULL, so round_robin
-- forgets which cohort it served last once, at the upgrade. Rows running during the upgrade
-- count as started (started_at is set on them) and get claimed_at = started_at.
-- The index builds inside this migration's transaction, which holds writes to jobs for the
-- seconds a large table takes.

ALTER TABLE {schema}.jobs ADD COLUMN claimed_at timestamptz;
ALTER TABLE {schema}.jobs_archive ADD COLUMN claimed_at timestamptz;

UPDATE {schema}.jobs SET claimed_at = started_at WHERE status = 'running';

CREATE INDEX jobs_cohort_claimed_idx ON {schema}.jobs
    (queue, (COALESCE(fairness_key, '__null__')), claimed_at DESC)
    WHERE claimed_at IS NOT NULL;
DROP INDEX {schema}.jobs_cohort_served_idx;
