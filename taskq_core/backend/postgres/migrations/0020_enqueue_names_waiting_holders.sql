-- The SQL entry point (0015) names a waiting workflow step as the holder of a unique key:
-- the unique index counts 'waiting' since 0018, so the function's lookup of the holder does
-- too. Before, a key a waiting step held was refused by the index but named by nobody, and
-- the call answered 40001 ("kept conflicting") after its retries instead of 23505 with the
-- holder's id. A deliberate copy of 0015's function, that one line changed: a migration
-- replaces a function by restating it whole, and 0015 stays as it was applied.
CREATE OR REPLACE FUNCTION {schema}.enqueue(
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
          AND (j.unique_until IS NOT NULL
               OR j.status IN ('waiting', 'pending', 'scheduled', 'running'))
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
