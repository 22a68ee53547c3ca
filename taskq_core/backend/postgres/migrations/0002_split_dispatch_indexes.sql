-- One dispatch index entry per pending job without a fairness key, instead of two.
--
-- 0001 indexed every pending row twice in queue order: by (queue, priority, time) for
-- strict_fifo (jobs_queue_dispatch_idx) and by (queue, cohort, priority, time) for
-- round_robin (jobs_fair_dispatch_idx). A row without a fairness key is alone in the
-- '__null__' cohort, where the second order is the first, so jobs_fair_dispatch_idx alone
-- serves it. Only keyed rows still need the strict_fifo order across cohorts: the new index
-- holds just them. Strict_fifo windows merge the two heads. Each index entry costs a bulk
-- enqueue about a quarter of its server time per row (docs/performance.md).
--
-- jobs_fair_dispatch_idx keeps every pending row, so "the pending jobs of a queue" (counts,
-- existence, positions) still reads one index whose statistics never look empty.
--
-- The index builds inside this migration's transaction, which holds writes to jobs for the
-- few seconds a large backlog takes.

CREATE INDEX jobs_keyed_dispatch_idx ON {schema}.jobs (queue, priority DESC, scheduled_at, id)
    WHERE status = 'pending' AND fairness_key IS NOT NULL;

DROP INDEX {schema}.jobs_queue_dispatch_idx;
