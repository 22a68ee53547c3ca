-- Batches: the finalizer a batch enqueues when it ends, and the indexes its hook and sweeps walk.
--
-- A batch's children carry metadata.batch_id (the contract's name, no column of its own). The
-- hook after each child's terminal write asks whether any child is still pending, scheduled or
-- running, and counts them by status, through jobs_batch_idx: a probe of one batch's entries,
-- never a scan. Jobs outside a batch are not in the index.
--
-- finalizer: the finalizer's enqueue arguments (with its job id fixed when the batch was made),
-- enqueued once when the batch leaves 'active'; finalizer_job_id is set then.
ALTER TABLE {schema}.batches ADD COLUMN finalizer jsonb;

-- outcomes_left: children whose terminal outcome the hook has not seen yet (expected_size at
-- creation). The hook looks for a child still waiting or running only once it is 0 or less,
-- so a big batch's hooks do not walk its index entries (dead ones included, while a long
-- transaction keeps them) on every call. It only gates the look: a count that is off (a
-- child ended with no hook, a retried child counted twice) delays the end to the leader's
-- stale sweep or to the next hook, and never ends a batch early.
ALTER TABLE {schema}.batches ADD COLUMN outcomes_left integer NOT NULL DEFAULT 0;

CREATE INDEX jobs_batch_idx ON {schema}.jobs ((metadata->>'batch_id'), status)
    WHERE metadata ? 'batch_id';

-- prune_old_batches walks ended batches oldest first.
CREATE INDEX batches_ended_idx ON {schema}.batches (completed_at) WHERE status <> 'active';
