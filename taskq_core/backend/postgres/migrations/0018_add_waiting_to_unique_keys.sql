-- A workflow step that waits holds its unique key as a pending job does: the unique index's
-- predicate gains 'waiting'. Rebuilt in this migration's transaction under the same name (the
-- enqueue maps a violation of jobs_unique_key_idx to SingletonCollisionError), as 0010 built
-- jobs_batch_idx. Not CONCURRENTLY: a concurrent build waits for every open transaction,
-- including a second migrator's waiting on the migration lock, which waits for this one.
DROP INDEX {schema}.jobs_unique_key_idx;
CREATE UNIQUE INDEX jobs_unique_key_idx ON {schema}.jobs (unique_key)
    WHERE unique_key IS NOT NULL
      AND (unique_until IS NOT NULL OR status IN ('waiting', 'pending', 'scheduled', 'running'));
