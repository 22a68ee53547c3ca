-- Rate limits and reservations: token buckets (rate_limit_buckets), sliding windows
-- (rate_limit_window_entries) and reservation slots (reservation_slots). Every acquire is one
-- statement on the server's clock (one clock_timestamp() reading, in `k`), so the workers'
-- clocks never matter; concurrent acquirers serialize on row locks, never on a count taken
-- from a stale snapshot.
--
-- A token or window entry is taken with synchronous_commit off (set_config in `k`, local to
-- the statement's transaction): acquirers queue on one row lock, and a synchronous commit
-- would hold it through a WAL flush each, so a limit's admissions ran at the disk's flush rate
-- while every waiting consumer sat idle. What a server crash can lose is the last fraction of
-- a second of takes: the bucket or window forgets them and admits that many again, once.
-- Reservation slots keep synchronous commits: a forgotten slot would let one more job run at
-- once than the reservation allows, for as long as the job runs.

-- name: acquire_tokens
-- Calls taking tokens from bucket $1, which refills $2 tokens a second up to $3 (a bucket never
-- seen is full); $4 holds, for each call in order, the tokens it and the calls before it take
-- together (its cost, summed up: 1, 2, 3, ... when each costs one). The calls the tokens there
-- cover are granted, in order (`granted`: how many; they stop at the first call not covered),
-- `remaining` the tokens left. Each call not granted gets a place in the bucket's line
-- (rate_limit_lines), a place being when the call's tokens are there: `wait` is the first
-- one's, in seconds, the later of when its tokens are there and its cost in refill intervals
-- after the previous denied call's place; each other one follows its own cost in intervals
-- later. The bucket row is locked (FOR UPDATE reads its newest version) before the line's row,
-- by every acquirer, so concurrent calls see the tokens the previous one left and get
-- distinct places.
-- `k.now` is read when the statement starts, so an acquirer that waited for the row lock may
-- find updated_at later than its own now: it gets no refill and leaves updated_at where it
-- was (GREATEST), so no interval is ever refilled twice. A bucket created by a concurrent
-- first acquire after this statement's snapshot is not seen: nothing is granted, and the
-- first call's tokens are taken to come as into an empty bucket.
WITH k AS (
    SELECT clock_timestamp() AS now,
           make_interval(secs => 1 / $2::float8) AS step,
           set_config('synchronous_commit', 'off', true) AS async_commit,
           cardinality($4::float8[]) AS calls,
           ($4::float8[])[cardinality($4::float8[])] AS units
),
seeded AS (
    INSERT INTO {schema}.rate_limit_buckets (key, tokens, updated_at)
    SELECT $1::text,
           $3::float8 - COALESCE(($4::float8[])[width_bucket($3::float8, $4::float8[])], 0),
           k.now
    FROM k
    ON CONFLICT (key) DO NOTHING
    RETURNING tokens
),
bucket AS (
    SELECT b.tokens, b.updated_at
    FROM {schema}.rate_limit_buckets b
    WHERE b.key = $1::text
    FOR UPDATE
),
available AS (
    -- NULL when the bucket is not in this snapshot (LEAST alone would skip the NULL and
    -- read a full bucket: a token granted that no row counts).
    SELECT CASE WHEN b.tokens IS NOT NULL
                THEN LEAST($3::float8, b.tokens + $2::float8 * GREATEST(e.elapsed, 0))
           END AS available,
           -- Without the clamp: below the tokens when the bucket counted ahead.
           CASE WHEN b.tokens IS NOT NULL
                THEN LEAST($3::float8, b.tokens + $2::float8 * e.elapsed)
           END AS counted
    FROM k
    LEFT JOIN bucket b ON true
    CROSS JOIN LATERAL (
        SELECT EXTRACT(EPOCH FROM k.now - b.updated_at)::float8 AS elapsed) e
),
share AS (
    -- The calls granted: all that fit a new bucket, else those the available tokens cover
    -- (none when the bucket is not in this snapshot); `units` the tokens they take.
    SELECT g.granted, COALESCE(($4::float8[])[g.granted], 0) AS units, a.available, a.counted
    FROM available a
    CROSS JOIN LATERAL (
        -- The calls whose running total is at most the tokens (width_bucket counts them: the
        -- totals only grow).
        SELECT COALESCE(width_bucket(
                   CASE WHEN EXISTS (SELECT 1 FROM seeded) THEN $3::float8 ELSE a.available END,
                   $4::float8[]), 0) AS granted
    ) g
),
taken AS (
    UPDATE {schema}.rate_limit_buckets b
    SET tokens = s.available - s.units,
        updated_at = GREATEST(b.updated_at, (SELECT k.now FROM k))
    FROM share s
    WHERE b.key = $1::text AND s.granted > 0 AND NOT EXISTS (SELECT 1 FROM seeded)
    RETURNING b.tokens
),
-- Tokens left once the share is taken, as a denied call counts them (NULL: the bucket is
-- not in this snapshot). May be negative: time the bucket already counted ahead of this
-- reading is still to come, and a denied call waits for it too.
left_over AS (
    SELECT COALESCE((SELECT s.tokens FROM seeded s),
                    (SELECT s.counted - s.units FROM share s)) AS tokens
),
-- The denied calls: `units` their tokens together, `first` the first one's cost. The line's
-- end is the place after the last one: it moves on by `units` intervals, and is no sooner
-- than when these calls' tokens will all be there, one interval on.
denied AS (
    SELECT k.units - s.units AS units,
           ($4::float8[])[s.granted + 1] - s.units AS first
    FROM share s CROSS JOIN k
    WHERE s.granted < k.calls
),
placed AS (
    INSERT INTO {schema}.rate_limit_lines AS l (key, ends_at)
    SELECT $1::text,
           k.now + make_interval(secs => (d.units + 1 - COALESCE(o.tokens, 0)) / $2::float8)
    FROM denied d CROSS JOIN left_over o CROSS JOIN k
    ON CONFLICT (key) DO UPDATE
    SET ends_at = GREATEST(
            l.ends_at + (SELECT k.step * d.units FROM denied d CROSS JOIN k),
            EXCLUDED.ends_at)
    RETURNING l.ends_at
)
SELECT s.granted,
       COALESCE((SELECT s2.tokens FROM seeded s2), (SELECT t.tokens FROM taken t)) AS remaining,
       (SELECT EXTRACT(EPOCH FROM p.ends_at - k.step * (d.units - d.first + 1) - k.now)::float8
        FROM placed p CROSS JOIN denied d CROSS JOIN k) AS wait
FROM share s;

-- name: acquire_window_entry
-- Sliding window $1 of $2 (the window) holds exactly `limit` entry rows (see
-- size_window_entries); an entry is free when its last use is older than the window. A call
-- costing $4 uses takes the $4 oldest free entries, all or none: taking them with FOR UPDATE
-- SKIP LOCKED is the acquire (a concurrent acquirer skips the rows being taken, and a row
-- taken since this statement's snapshot is re-checked on its new version and no longer
-- qualifies). Returns `allowed` and `entries` (whether the key has entry rows enough: none
-- means not sized yet) and, denied, `wait`: the seconds until the call's place in the window's
-- line (rate_limit_lines), the later of when the $4th oldest entry leaves the window and $4
-- times $3 (window / limit) after the previous denied call's place.
WITH k AS (
    SELECT clock_timestamp() AS now,
           set_config('synchronous_commit', 'off', true) AS async_commit
),
free AS (
    SELECT e.id
    FROM {schema}.rate_limit_window_entries e
    WHERE e.key = $1::text AND e.occurred_at <= (SELECT k.now - $2::interval FROM k)
    ORDER BY e.occurred_at
    LIMIT $4::integer
    FOR UPDATE SKIP LOCKED
),
taken AS (
    -- Stamped when the rows are taken (after any lock wait), not when the statement began:
    -- the entries then leave the window no sooner than they should.
    UPDATE {schema}.rate_limit_window_entries e
    SET occurred_at = clock_timestamp()
    FROM free f
    WHERE e.id = f.id AND (SELECT count(*) FROM free) = $4::integer
    RETURNING e.id
),
blocking AS (
    SELECT e.occurred_at + $2::interval AS frees_at
    FROM {schema}.rate_limit_window_entries e
    WHERE e.key = $1::text
    ORDER BY e.occurred_at
    OFFSET $4::integer - 1
    LIMIT 1
),
placed AS (
    INSERT INTO {schema}.rate_limit_lines AS l (key, ends_at)
    SELECT $1::text, GREATEST(o.frees_at, k.now) + $3::interval
    FROM blocking o CROSS JOIN k
    WHERE NOT EXISTS (SELECT 1 FROM taken)
    ON CONFLICT (key) DO UPDATE
    SET ends_at = GREATEST(l.ends_at + $3::interval * $4::integer, EXCLUDED.ends_at)
    RETURNING l.ends_at
)
SELECT EXISTS (SELECT 1 FROM taken) AS allowed,
       EXISTS (SELECT 1 FROM blocking) AS entries,
       (SELECT EXTRACT(EPOCH FROM p.ends_at - $3::interval - k.now)::float8
        FROM placed p CROSS JOIN k) AS wait;

-- name: lock_window_key
-- Serializes the sizing of window $1 (transaction-scoped advisory lock).
SELECT pg_advisory_xact_lock(hashtext('taskq_rate_limit_window'), hashtext($1::text));

-- name: size_window_entries
-- Window $1 gets exactly $2 entry rows: missing ones are added as never used (the epoch),
-- the oldest extra ones (the limit went down) deleted. Run after lock_window_key in the same
-- transaction, so this statement's snapshot already sees a concurrent sizing's rows.
WITH have AS (
    SELECT count(*)::integer AS n FROM {schema}.rate_limit_window_entries WHERE key = $1::text
),
added AS (
    INSERT INTO {schema}.rate_limit_window_entries (key, occurred_at)
    SELECT $1::text, 'epoch'::timestamptz
    FROM have CROSS JOIN generate_series(1, GREATEST($2::integer - have.n, 0))
),
extra AS (
    DELETE FROM {schema}.rate_limit_window_entries e
    WHERE e.id IN (SELECT x.id FROM {schema}.rate_limit_window_entries x
                   WHERE x.key = $1::text
                   ORDER BY x.occurred_at DESC
                   OFFSET $2::integer)
)
SELECT 1;

-- name: get_queue_caps
-- The queues among $1 that set max_concurrent, and its value: the worker holds a slot of the
-- queue's reservation per running job of it.
SELECT q.name, q.max_concurrent
FROM {schema}.queues q
WHERE q.name = ANY ($1::text[]) AND q.max_concurrent IS NOT NULL;

-- name: ensure_reservation_slots
-- Reservation $1 has rows for slots 0..$2-1 (a slot row is never deleted: a smaller count
-- only stops acquires from using the higher slots).
INSERT INTO {schema}.reservation_slots (name, slot)
SELECT $1::text, s FROM generate_series(0, $2::integer - 1) s
ON CONFLICT (name, slot) DO NOTHING;

-- name: acquire_reservation
-- Hold one slot below $2 of reservation $1 for job $3 of worker $4 until now + $5: a slot the
-- job holds already (an earlier attempt's) first, else the lowest free one (never held,
-- released, or its lease run out). SKIP LOCKED: a slot another acquirer is taking is passed
-- over, and one taken since this statement's snapshot no longer qualifies on its re-check.
-- Returns the slot, no row when every slot is held.
WITH k AS (
    SELECT clock_timestamp() AS now
),
free AS (
    SELECT s.name, s.slot
    FROM {schema}.reservation_slots s
    WHERE s.name = $1::text AND s.slot < $2::integer
      AND (s.job_id IS NULL OR s.job_id = $3::uuid
           OR s.lease_expires_at <= (SELECT k.now FROM k))
    ORDER BY s.job_id IS NOT DISTINCT FROM $3::uuid DESC, s.slot
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.reservation_slots s
SET job_id = $3::uuid, worker_id = $4::uuid, lease_expires_at = k.now + $5::interval
FROM free f CROSS JOIN k
WHERE s.name = f.name AND s.slot = f.slot
RETURNING s.slot;

-- name: release_reservations
-- Free the slots job $1 holds under worker $2 (only those named in $3 when it is not NULL):
-- a slot another attempt of the job took over on another worker is not this worker's to free.
WITH freed AS (
    UPDATE {schema}.reservation_slots s
    SET job_id = NULL, worker_id = NULL, lease_expires_at = NULL
    WHERE s.worker_id = $2::uuid AND s.job_id = $1::uuid
      AND ($3::text[] IS NULL OR s.name = ANY ($3::text[]))
    RETURNING 1
)
SELECT count(*) FROM freed;

-- name: extend_reservation_leases
-- The heartbeat's renewal: the slots worker $1 holds for the jobs $2 it still holds last
-- until now + $3.
WITH renewed AS (
    UPDATE {schema}.reservation_slots s
    SET lease_expires_at = clock_timestamp() + $3::interval
    WHERE s.worker_id = $1::uuid AND s.job_id = ANY ($2::uuid[])
    RETURNING 1
)
SELECT count(*) FROM renewed;

-- name: sweep_leaked_reservation_slots
-- The leaked-slot sweep: free slots whose lease ran out (no heartbeat renews them: the
-- worker died or no longer holds the job) or whose job ended or is gone (a release lost with its worker). A
-- job that is merely not running (yet) does not count: this statement's snapshot may predate
-- the dispatch of a job that holds a slot now. Slots being taken or released are skipped.
WITH k AS (
    SELECT clock_timestamp() AS now
),
leaked AS (
    SELECT s.name, s.slot
    FROM {schema}.reservation_slots s
    WHERE s.job_id IS NOT NULL
      AND (s.lease_expires_at <= (SELECT k.now FROM k)
           OR NOT EXISTS (SELECT 1 FROM {schema}.jobs j
                          WHERE j.id = s.job_id
                            AND j.status IN ('pending', 'scheduled', 'running')))
    FOR UPDATE OF s SKIP LOCKED
),
freed AS (
    UPDATE {schema}.reservation_slots s
    SET job_id = NULL, worker_id = NULL, lease_expires_at = NULL
    FROM leaked l
    WHERE s.name = l.name AND s.slot = l.slot
    RETURNING 1
)
SELECT count(*) FROM freed;

-- name: list_held_reservation_slots
-- Slots held now (lease not run out), only reservation $1's when it is not NULL.
SELECT s.name, s.slot, s.job_id, s.worker_id, s.lease_expires_at
FROM {schema}.reservation_slots s
WHERE s.job_id IS NOT NULL AND s.lease_expires_at > clock_timestamp()
  AND ($1::text IS NULL OR s.name = $1::text)
ORDER BY s.name, s.slot;

-- name: register_rate_limits
-- A worker's start: its limits' definitions, parallel arrays ($1 names, $2 kinds, $3
-- capacities, $4 refill per second, $5 window spans, $6 keyed, $7 stores); the code wins.
INSERT INTO {schema}.rate_limits AS r (name, kind, capacity, per_second, span, keyed, store)
SELECT * FROM unnest($1::text[], $2::text[], $3::float8[], $4::float8[], $5::interval[],
                     $6::boolean[], $7::text[])
ON CONFLICT (name) DO UPDATE
SET kind = excluded.kind, capacity = excluded.capacity, per_second = excluded.per_second,
    span = excluded.span, keyed = excluded.keyed, store = excluded.store,
    updated_at = clock_timestamp();

-- name: get_rate_limit_usage
-- Every registered limit with the use of its instances now (`<name>` and, keyed,
-- `<name>:<key>`): tokens spent of the burst with the refill counted, entries within the
-- window, slots held (lease not run out); at most $1 instances per limit, most used first.
-- A limit without state has one row with a NULL instance; a rate limit kept in Redis gets no
-- state from here. For `taskq top`: it reads every state row of the registered limits.
-- Only a keyed limit owns the `<name>:<key>` instances: an unkeyed one is its name alone.
-- Queue caps (`queue-cap:<queue>` slots) are not listed: they are the queues' own columns.
WITH k AS (
    SELECT clock_timestamp() AS now
),
d AS (
    SELECT * FROM {schema}.rate_limits
),
used AS (
    SELECT d.name, b.key AS instance,
           d.capacity - LEAST(d.capacity, b.tokens + d.per_second * GREATEST(
               EXTRACT(EPOCH FROM k.now - b.updated_at)::float8, 0)) AS used
    FROM d
    JOIN {schema}.rate_limit_buckets b
        ON b.key = d.name OR (d.keyed AND left(b.key, length(d.name) + 1) = d.name || ':')
    CROSS JOIN k
    WHERE d.kind = 'token_bucket' AND d.store = 'postgres'
    UNION ALL
    SELECT d.name, e.key, (count(*) FILTER (WHERE e.occurred_at > k.now - d.span))::float8
    FROM d
    JOIN {schema}.rate_limit_window_entries e
        ON e.key = d.name OR (d.keyed AND left(e.key, length(d.name) + 1) = d.name || ':')
    CROSS JOIN k
    WHERE d.kind = 'sliding_window' AND d.store = 'postgres'
    GROUP BY d.name, e.key
    UNION ALL
    SELECT d.name, s.name,
           (count(*) FILTER (WHERE s.job_id IS NOT NULL AND s.lease_expires_at > k.now))::float8
    FROM d
    JOIN {schema}.reservation_slots s
        ON s.name = d.name OR (d.keyed AND left(s.name, length(d.name) + 1) = d.name || ':')
    CROSS JOIN k
    WHERE d.kind = 'reservation'
    GROUP BY d.name, s.name
),
ranked AS (
    SELECT u.*, row_number() OVER (PARTITION BY u.name ORDER BY u.used DESC, u.instance) AS rank
    FROM used u
)
SELECT d.name, d.kind, d.capacity, d.per_second, d.span, d.keyed, d.store, r.instance, r.used
FROM d
LEFT JOIN ranked r ON r.name = d.name AND r.rank <= $1::integer
ORDER BY d.name, r.used DESC NULLS LAST, r.instance;

-- name: sweep_idle_limiter_state
-- Limiter state nobody used for $1, beyond the time it takes to come back to rest (a bucket's
-- refill to its whole burst, a window's span, from the limit's definition when there is one),
-- is deleted: at most $2 buckets and $2 window keys. A bucket with no row is full and a window
-- with no entries is sized again at its next use, so no decision changes; what goes is the
-- one instance per key a keyed limit leaves behind for every key it ever saw. A bucket being
-- used is skipped (SKIP LOCKED). A window goes whole or not at all: its entries are locked
-- first (SKIP LOCKED: an acquirer is taking some) and read again at their newest version, and
-- the key goes only when it holds every entry it had and none was used since (an acquirer
-- that took entries after this statement's snapshot would otherwise see them deleted, the
-- window sized again with unused ones, and admit its limit a second time within one window).
-- Reservation slots stay: their rows carry no time of use, and an acquire never sizes a
-- reservation twice.
WITH k AS (
    SELECT clock_timestamp() - $1::interval AS before
),
idle_buckets AS (
    SELECT b.key
    FROM {schema}.rate_limit_buckets b
    LEFT JOIN LATERAL (
        SELECT d.capacity / d.per_second AS refill
        FROM {schema}.rate_limits d
        WHERE d.kind = 'token_bucket'
          AND (b.key = d.name OR (d.keyed AND left(b.key, length(d.name) + 1) = d.name || ':'))
        ORDER BY length(d.name) DESC
        LIMIT 1
    ) d ON true
    WHERE b.updated_at < (SELECT k.before FROM k) - make_interval(secs => COALESCE(d.refill, 0))
    LIMIT $2::integer
    FOR UPDATE OF b SKIP LOCKED
),
gone_buckets AS (
    DELETE FROM {schema}.rate_limit_buckets b
    USING idle_buckets i
    WHERE b.key = i.key
    RETURNING 1
),
-- The definition lookup repeats idle_buckets' (longest matching name) for the other kind
-- of limit: the two differ in their kind, key column and the span they read.
idle_windows AS (
    SELECT e.key, count(*) AS entries,
           (SELECT k.before FROM k) - COALESCE(d.span, interval '0') AS before
    FROM {schema}.rate_limit_window_entries e
    LEFT JOIN LATERAL (
        SELECT d.span
        FROM {schema}.rate_limits d
        WHERE d.kind = 'sliding_window'
          AND (e.key = d.name OR (d.keyed AND left(e.key, length(d.name) + 1) = d.name || ':'))
        ORDER BY length(d.name) DESC
        LIMIT 1
    ) d ON true
    GROUP BY e.key, d.span
    HAVING max(e.occurred_at) < (SELECT k.before FROM k) - COALESCE(d.span, interval '0')
    LIMIT $2::integer
),
-- Locking reads each entry's newest version: one taken since the snapshot shows its new time.
locked_entries AS (
    SELECT e.id, e.key, e.occurred_at
    FROM {schema}.rate_limit_window_entries e
    WHERE e.key IN (SELECT i.key FROM idle_windows i)
    FOR UPDATE OF e SKIP LOCKED
),
whole_windows AS (
    SELECT i.key
    FROM idle_windows i
    JOIN locked_entries l ON l.key = i.key
    GROUP BY i.key, i.entries, i.before
    HAVING count(*) = i.entries AND max(l.occurred_at) < i.before
),
gone_windows AS (
    DELETE FROM {schema}.rate_limit_window_entries e
    USING locked_entries l
    WHERE e.id = l.id AND l.key IN (SELECT w.key FROM whole_windows w)
    RETURNING e.key
),
-- A line whose last place passed longer than $1 ago holds nobody.
gone_lines AS (
    DELETE FROM {schema}.rate_limit_lines l
    WHERE l.key IN (SELECT x.key FROM {schema}.rate_limit_lines x
                    WHERE x.ends_at < (SELECT k.before FROM k)
                    LIMIT $2::integer
                    FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone_buckets) AS buckets,
       (SELECT count(DISTINCT g.key) FROM gone_windows g) AS windows,
       (SELECT count(*) FROM gone_lines) AS lines;
