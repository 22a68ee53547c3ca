-- Autovacuum settings for the tables a running queue churns (docs/operations.md says why,
-- docs/performance.md has the measurements).
--
-- Every job updates its jobs row at least twice (claim, settle), and neither update can be
-- HOT: each changes status, which every partial index's predicate reads, and an indexed
-- column (claimed_at, finished_at). So each claim leaves a dead entry at the head of the
-- dispatch index, and every dispatch walks the leaf pages holding the dead entries left since
-- the last vacuum: in a million-job drain, 900-1,900 buffers per window read with a vacuum a
-- minute, 30-200 with one every 10 seconds. The defaults wait for dead rows worth a fifth of
-- the table: 200,000 at a million rows, two million in a table holding 30 days of finished
-- jobs. Here a vacuum is due after 1% (and at least 1,000 rows), runs unthrottled, and
-- ANALYZE follows a backlog that empties and fills. Under heavy load a vacuum is due every
-- time autovacuum looks (autovacuum_naptime, a server setting): docs/operations.md.
--
-- No fillfactor: only the start mark (started_at) could be a HOT update, 3% of the updates
-- measured, not worth a larger heap.
--
-- job_events and job_attempts only grow between prunes; a prune deletes in batches. Their
-- insert-triggered vacuum (visibility map, freezing) and their vacuum after a prune come
-- sooner, so neither turns into one long pass over a big table.
--
-- These are storage parameters: ALTER TABLE SET takes a SHARE UPDATE EXCLUSIVE lock for a
-- moment and rewrites nothing. Autovacuum must be on in the server for any of them to act.

ALTER TABLE {schema}.jobs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.02
);

ALTER TABLE {schema}.job_events SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.05
);

ALTER TABLE {schema}.job_attempts SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.05
);
