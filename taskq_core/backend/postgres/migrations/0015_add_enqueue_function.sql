-- A stable SQL entry point for producers in any language (docs/sql-api.md):
--
--   SELECT {schema}.enqueue(actor, payload, queue, run_at, priority, unique_key) -> uuid
--
-- What JobsClient.enqueue does for an actor named by its name: the queue, priority and retry
-- policy its workers stored (actor_config; the defaults while none has registered it), the
-- operator's max_pending, a unique key held while its job waits or runs, a UUIDv7 id, the wake
-- NOTIFY for a job that is due now (one that waits is announced to the leader's promotion).
-- Errors are raised with SQLSTATEs a driver can tell apart: 22023 (invalid_parameter_value)
-- for a bad argument, 23505 (unique_violation) for a key another job holds (its id in
-- DETAIL), 53400 (configuration_limit_exceeded) for max_pending.
-- The payload's size is measured on its jsonb text, against taskq.max_payload_bytes when the
-- session or database sets it (ALTER DATABASE ... SET taskq.max_payload_bytes = ...), else
-- 1 MiB, TASKQ_MAX_PAYLOAD_BYTES's default. The function's signature only grows; a later
-- change of behaviour keeps these arguments and their meaning.
CREATE FUNCTION {schema}.enqueue(
    actor text,
    payload jsonb,
    queue text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL,
    priority integer DEFAULT NULL,
    unique_key text DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $function$
DECLARE
    now_ timestamptz := clock_timestamp();
    config {schema}.actor_config%ROWTYPE;
    body jsonb := coalesce(payload, '{}'::jsonb);
    limit_bytes integer := coalesce(
        nullif(current_setting('taskq.max_payload_bytes', true), '')::integer, 1048576);
    size_bytes integer;
    target text;
    kind text;
    attempts integer;
    deadline timestamptz;
    waiting integer;
    new_id uuid;
    holder uuid;
BEGIN
    IF actor IS NULL OR actor = '' THEN
        RAISE EXCEPTION 'actor name must not be empty' USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(body) <> 'object' THEN
        RAISE EXCEPTION 'payload must be a JSON object, got %', jsonb_typeof(body)
            USING ERRCODE = '22023';
    END IF;
    size_bytes := octet_length(body::text);
    IF size_bytes > limit_bytes THEN
        RAISE EXCEPTION 'payload of actor % is % bytes, over the limit of % bytes',
            actor, size_bytes, limit_bytes USING ERRCODE = '22023';
    END IF;
    IF unique_key = '' THEN
        RAISE EXCEPTION 'unique_key must not be empty' USING ERRCODE = '22023';
    END IF;
    SELECT * INTO config FROM {schema}.actor_config c WHERE c.actor = enqueue.actor;
    target := coalesce(queue, config.queue, 'default');
    IF target !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}$' THEN
        RAISE EXCEPTION 'invalid queue name %: 1-200 ASCII letters, digits, ''_'', ''.'', '':'' or ''-'', starting with a letter, digit or ''_''',
            quote_literal(target) USING ERRCODE = '22023';
    END IF;
    IF config.max_pending IS NOT NULL THEN
        SELECT count(*) INTO waiting FROM {schema}.jobs j
        WHERE j.actor = enqueue.actor AND j.status IN ('pending', 'scheduled');
        IF waiting + 1 > config.max_pending THEN
            RAISE EXCEPTION 'actor % has % jobs waiting, its max_pending is %',
                actor, waiting, config.max_pending USING ERRCODE = '53400';
        END IF;
    END IF;
    kind := coalesce(config.retry_kind, 'transient');
    attempts := CASE WHEN config.retry_kind IS NULL THEN 3 ELSE config.max_attempts END;
    IF kind = 'indefinite' AND config.retry_time_budget IS NOT NULL THEN
        deadline := now_ + config.retry_time_budget;
    END IF;
    FOR pass IN 1..3 LOOP  -- a holder that ends while this runs frees its key: try again
        new_id := encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
            PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid;  -- a UUIDv7
        INSERT INTO {schema}.jobs AS j (
            id, actor, queue, payload, status, priority, scheduled_at, created_at, updated_at,
            schedule_to_close, retry_kind, max_attempts, unique_key
        )
        VALUES (
            new_id, enqueue.actor, target, body,
            (CASE WHEN run_at > now_ THEN 'scheduled' ELSE 'pending' END)::{schema}.job_status,
            coalesce(enqueue.priority, config.priority, 0), greatest(run_at, now_), now_, now_,
            deadline, kind, attempts, enqueue.unique_key
        )
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            IF run_at IS NULL OR run_at <= now_ THEN
                PERFORM pg_notify('taskq_wake_{schema}', '');
            ELSE  -- the leader's promotion wakes for it on time
                PERFORM pg_notify('taskq_events_{schema}', json_build_object(
                    'type', 'scheduled', 'in', extract(epoch FROM run_at - now_))::text);
            END IF;
            RETURN new_id;
        END IF;
        SELECT j.id INTO holder FROM {schema}.jobs j
        WHERE j.unique_key = enqueue.unique_key
          AND (j.unique_until IS NOT NULL OR j.status IN ('pending', 'scheduled', 'running'))
        LIMIT 1;
        IF holder IS NOT NULL THEN
            RAISE EXCEPTION 'a job with unique key % exists: %', quote_literal(unique_key), holder
                USING ERRCODE = '23505', DETAIL = holder::text;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'the enqueue kept conflicting with concurrent inserts; retry'
        USING ERRCODE = '40001';
END;
$function$;
