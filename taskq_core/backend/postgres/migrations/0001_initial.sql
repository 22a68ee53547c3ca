-- TaskQ initial schema. `{schema}` is replaced by the validated schema name at apply time.
-- Forward-only: never edit this file once applied; add a new numbered file instead.

CREATE TYPE {schema}.job_status AS ENUM (
    'pending', 'scheduled', 'running', 'succeeded', 'failed', 'cancelled', 'crashed', 'abandoned'
);

CREATE TABLE {schema}.jobs (
    id                  uuid PRIMARY KEY,
    actor               text NOT NULL,
    queue               text NOT NULL DEFAULT 'default',
    payload             jsonb NOT NULL DEFAULT '{}'::jsonb,
    status              {schema}.job_status NOT NULL DEFAULT 'pending',
    priority            integer NOT NULL DEFAULT 0,
    -- For pending rows: the time the job became dispatchable (FIFO order key).
    scheduled_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Retry policy snapshot, so the reclaim sweep can decide retry vs crashed in SQL.
    retry_kind          text NOT NULL DEFAULT 'transient'
                        CHECK (retry_kind IN ('transient', 'indefinite', 'non_retryable')),
    max_attempts        integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    attempt             integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    -- No FK to workers: a FK would take FOR KEY SHARE on the worker row at every dispatch.
    locked_by_worker    uuid,
    lock_expires_at     timestamptz,
    started_at          timestamptz,
    finished_at         timestamptz,
    cancel_phase        smallint NOT NULL DEFAULT 0 CHECK (cancel_phase BETWEEN 0 AND 2),
    cancel_requested_at timestamptz,
    cancel_reason       text,
    identity_key        text,
    fairness_key        text,
    schedule_to_close   timestamptz,
    result              jsonb,
    result_ttl          interval,
    result_expires_at   timestamptz,
    error_class         text,
    error_message       text,
    error_traceback     text,
    metadata            jsonb NOT NULL DEFAULT '{}'::jsonb,
    trace_id            text,
    span_id             text,
    progress_seq        integer NOT NULL DEFAULT 0,
    progress_state      jsonb,
    updated_at          timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Dispatch reads pending rows in priority-then-time order three ways:
-- per queue (the shared window of every actor without a cap; strict_fifo) ...
CREATE INDEX jobs_queue_dispatch_idx ON {schema}.jobs (queue, priority DESC, scheduled_at, id)
    WHERE status = 'pending';
-- ... per capped actor (its own small window, so a capped actor's backlog never blocks the
-- head of the queue; also pending counts per actor) ...
CREATE INDEX jobs_dispatch_idx ON {schema}.jobs (actor, queue, priority DESC, scheduled_at, id)
    WHERE status = 'pending';
-- ... and per fairness cohort (round_robin; NULL keys share the '__null__' cohort). A loose
-- index scan over it finds a queue's cohorts with one probe each, however deep the backlog.
CREATE INDEX jobs_fair_dispatch_idx ON {schema}.jobs
    (queue, (COALESCE(fairness_key, '__null__')), priority DESC, scheduled_at, id)
    WHERE status = 'pending';
-- When each fairness cohort of a queue last had a job start: round_robin serves the cohort
-- served least recently first among equals, so one-job-at-a-time dispatch still alternates.
CREATE INDEX jobs_cohort_served_idx ON {schema}.jobs
    (queue, (COALESCE(fairness_key, '__null__')), started_at DESC)
    WHERE started_at IS NOT NULL;
-- Scheduled promotion (scheduled -> pending when due).
CREATE INDEX jobs_scheduled_idx ON {schema}.jobs (scheduled_at) WHERE status = 'scheduled';
-- Lease expiry, per-worker heartbeat, running counts per actor and identity serialization.
CREATE INDEX jobs_running_lease_idx ON {schema}.jobs (lock_expires_at) WHERE status = 'running';
CREATE INDEX jobs_running_worker_idx ON {schema}.jobs (locked_by_worker) WHERE status = 'running';
CREATE INDEX jobs_running_actor_idx ON {schema}.jobs (actor, identity_key) WHERE status = 'running';
-- Deadline sweep.
CREATE INDEX jobs_deadline_idx ON {schema}.jobs (schedule_to_close)
    WHERE schedule_to_close IS NOT NULL AND status IN ('pending', 'scheduled');
-- Listings, dashboards and per-queue running counts. Pending rows are left out on purpose:
-- the dispatch indexes above already cover them, an enqueue maintains one index fewer, and
-- the planner is never tempted to fetch a whole queue's pending rows and sort them.
CREATE INDEX jobs_status_queue_idx ON {schema}.jobs (status, queue) WHERE status <> 'pending';
CREATE INDEX jobs_created_idx ON {schema}.jobs (created_at DESC);
CREATE INDEX jobs_finished_idx ON {schema}.jobs (status, finished_at DESC)
    WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_result_expiry_idx ON {schema}.jobs (result_expires_at)
    WHERE result_expires_at IS NOT NULL;

-- Dispatch's "not one of the capped actors" filter, opaque to the planner on purpose.
-- Written inline, its selectivity estimate is 0 whenever a queue holds a single actor, and
-- the generic plan then scans and sorts the whole backlog instead of walking the ordered
-- index until its LIMIT; a PL/pgSQL function gets the neutral default estimate.
CREATE FUNCTION {schema}.actor_not_in(actor text, excluded text[]) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ BEGIN RETURN actor <> ALL (excluded); END $$;

CREATE TABLE {schema}.job_attempts (
    id              bigserial PRIMARY KEY,
    job_id          uuid NOT NULL REFERENCES {schema}.jobs (id) ON DELETE CASCADE,
    attempt         integer NOT NULL,
    worker_id       uuid,
    outcome         text NOT NULL,
    started_at      timestamptz,
    finished_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    duration_ms     double precision,
    error_class     text,
    error_message   text,
    error_traceback text
);
CREATE INDEX job_attempts_job_idx ON {schema}.job_attempts (job_id, id);

CREATE TABLE {schema}.job_events (
    id          bigserial PRIMARY KEY,
    job_id      uuid NOT NULL REFERENCES {schema}.jobs (id) ON DELETE CASCADE,
    occurred_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind        text NOT NULL,
    from_status {schema}.job_status,
    to_status   {schema}.job_status,
    worker_id   uuid,
    detail      jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX job_events_job_idx ON {schema}.job_events (job_id, id);
-- The reclaim outbox cursor polls by id within this kind.
CREATE INDEX job_events_reclaim_idx ON {schema}.job_events (id) WHERE kind = 'reclaim';

CREATE TABLE {schema}.workers (
    id                 uuid PRIMARY KEY,
    hostname           text NOT NULL,
    pid                integer NOT NULL,
    worker_label       text,
    workgroup_instance text,
    queues             text[] NOT NULL DEFAULT '{}',
    actors             text[] NOT NULL DEFAULT '{}',
    concurrency        integer NOT NULL DEFAULT 0,
    version            text,
    started_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    stopped_at         timestamptz,
    status             text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'stopped'))
);
CREATE INDEX workers_last_seen_idx ON {schema}.workers (last_seen_at DESC);
CREATE INDEX workers_pid_idx ON {schema}.workers (hostname, pid);

CREATE TABLE {schema}.actor_config (
    actor          text PRIMARY KEY,
    queue          text NOT NULL,
    metadata       jsonb NOT NULL DEFAULT '{}'::jsonb,
    -- Capacity: operator-owned. NULL max_concurrent = unlimited; NULL max_pending and
    -- result_ttl = the @actor literal.
    max_concurrent integer CHECK (max_concurrent IS NULL OR max_concurrent >= 0),
    max_pending    integer CHECK (max_pending IS NULL OR max_pending >= 0),
    result_ttl     interval,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE {schema}.queues (
    name           text PRIMARY KEY,
    mode           text NOT NULL DEFAULT 'strict_fifo' CHECK (mode IN ('strict_fifo', 'round_robin')),
    max_concurrent integer CHECK (max_concurrent IS NULL OR max_concurrent >= 0),
    paused         boolean NOT NULL DEFAULT false,
    updated_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE {schema}.maintenance_leader (
    name         text PRIMARY KEY,
    worker_id    uuid NOT NULL,
    elected_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE {schema}.schedules (
    id            uuid PRIMARY KEY,
    name          text NOT NULL UNIQUE,
    actor         text NOT NULL,
    queue         text,
    cron          text NOT NULL,
    timezone      text NOT NULL DEFAULT 'UTC',
    payload       jsonb NOT NULL DEFAULT '{}'::jsonb,
    enabled       boolean NOT NULL DEFAULT true,
    next_fire_at  timestamptz,
    last_fired_at timestamptz,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX schedules_due_idx ON {schema}.schedules (next_fire_at) WHERE enabled;

CREATE TABLE {schema}.batches (
    id                   uuid PRIMARY KEY,
    queue                text NOT NULL,
    status               text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'complete', 'aborted')),
    expected_size        integer NOT NULL DEFAULT 0,
    consecutive_failures integer NOT NULL DEFAULT 0,
    failure_threshold    integer,
    finalizer_job_id     uuid,
    originating_actor    text,
    created_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at         timestamptz,
    metadata             jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX batches_active_idx ON {schema}.batches (created_at) WHERE status = 'active';

CREATE TABLE {schema}.reservation_slots (
    name             text NOT NULL,
    slot             integer NOT NULL,
    job_id           uuid,
    worker_id        uuid,
    lease_expires_at timestamptz,
    PRIMARY KEY (name, slot)
);
CREATE INDEX reservation_slots_worker_idx ON {schema}.reservation_slots (worker_id)
    WHERE worker_id IS NOT NULL;

CREATE TABLE {schema}.rate_limit_buckets (
    key        text PRIMARY KEY,
    tokens     double precision NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE {schema}.rate_limit_window_entries (
    id          bigserial PRIMARY KEY,
    key         text NOT NULL,
    occurred_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX rate_limit_window_key_idx ON {schema}.rate_limit_window_entries (key, occurred_at);

-- Archive: terminal jobs moved out of the hot table by the prune sweep.
CREATE TABLE {schema}.jobs_archive (
    LIKE {schema}.jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    archived_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expire_at   timestamptz NOT NULL,
    PRIMARY KEY (id)
);
CREATE INDEX jobs_archive_expire_idx ON {schema}.jobs_archive (expire_at);

CREATE TABLE {schema}.job_attempts_archive (
    LIKE {schema}.job_attempts INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    PRIMARY KEY (id),
    FOREIGN KEY (job_id) REFERENCES {schema}.jobs_archive (id) ON DELETE CASCADE
);
CREATE INDEX job_attempts_archive_job_idx ON {schema}.job_attempts_archive (job_id);
