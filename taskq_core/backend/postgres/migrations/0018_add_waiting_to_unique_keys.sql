-- taskq:no-transaction
-- A workflow step that waits holds its unique key as a pending job does: the unique index's
-- predicate gains 'waiting'. Built CONCURRENTLY under a new name, then swapped in, so
-- enqueues and workers go on while it builds; the name stays jobs_unique_key_idx (the
-- enqueue maps a violation of that index to SingletonCollisionError).
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_unique_key_next_idx ON {schema}.jobs (unique_key)
    WHERE unique_key IS NOT NULL
      AND (unique_until IS NOT NULL OR status IN ('waiting', 'pending', 'scheduled', 'running'));
DROP INDEX CONCURRENTLY IF EXISTS {schema}.jobs_unique_key_idx;
ALTER INDEX {schema}.jobs_unique_key_next_idx RENAME TO jobs_unique_key_idx;
