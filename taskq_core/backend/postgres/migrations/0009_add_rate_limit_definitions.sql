-- Rate limit definitions, as the workers declare them.
--
-- A limit is defined in code (@actor(rate_limits=..., reservations=...)); its state lives in
-- rate_limit_buckets, rate_limit_window_entries and reservation_slots (or in Redis), which
-- hold no definition. Each worker start upserts the limits it enforces here, so a reader with
-- no code (taskq top) can tell each limit's use: tokens spent of the burst, entries within
-- the window, slots held. `store` says where the state of a rate limit lives ('postgres' or
-- 'redis'); reservations are always in PostgreSQL. `keyed`: one instance per payload key,
-- named `<name>:<key>`. Nothing reads a definition to enforce a limit: the code does that.
CREATE TABLE {schema}.rate_limits (
    name        text PRIMARY KEY,
    kind        text NOT NULL
                CHECK (kind IN ('token_bucket', 'sliding_window', 'reservation')),
    capacity    double precision NOT NULL CHECK (capacity > 0),  -- burst, limit or slots
    per_second  double precision CHECK (per_second > 0),         -- token_bucket refill
    span        interval CHECK (span > interval '0'),             -- sliding_window
    keyed       boolean NOT NULL DEFAULT false,
    store       text NOT NULL DEFAULT 'postgres' CHECK (store IN ('postgres', 'redis')),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A release finds a job's slots by job (not by name).
CREATE INDEX reservation_slots_job_idx ON {schema}.reservation_slots (job_id)
    WHERE job_id IS NOT NULL;
