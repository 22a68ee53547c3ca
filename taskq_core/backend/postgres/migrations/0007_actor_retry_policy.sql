-- The retry policy and priority each actor's code declares, written by every worker start
-- (the code's current policy, never drift), so a job enqueued by name from a process that
-- does not import the actor (`taskq enqueue ACTOR`, another service) gets the actor's
-- attempts, deadline and priority instead of the defaults. NULL: no worker has started
-- since this migration; a by-name enqueue then uses the default policy, as before.
-- Adding nullable columns without defaults rewrites nothing: instant on any table size.

ALTER TABLE {schema}.actor_config
    ADD COLUMN retry_kind text
        CHECK (retry_kind IN ('transient', 'indefinite', 'non_retryable')),
    ADD COLUMN max_attempts integer CHECK (max_attempts >= 1),
    ADD COLUMN retry_time_budget interval,
    ADD COLUMN priority integer;
