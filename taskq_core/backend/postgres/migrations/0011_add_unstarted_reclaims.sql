-- How often the reclaim sweep gave a job back because its body's start was never recorded.
--
-- A worker records a body's start asynchronously (batched), so a body that kills its process
-- within its first milliseconds dies before its start is written, and every reclaim of it
-- looked unstarted: no crash counted, so the poison rule never caught it. The claim returns
-- this count with the job; a worker that sees it above 0 writes the start before the body
-- runs, so from its second run on such a job's crashes count. The reclaim's "counts as
-- started after UNSTARTED_RECLAIM_LIMIT unstarted reclaims" rule reads the column too, where
-- it counted the job's reclaim events before (same number, read from the row it locks).
--
-- The count is never reset (the event count it replaces never was). smallint: the count stops
-- growing at UNSTARTED_RECLAIM_LIMIT, past which every reclaim counts as started.
-- NOT NULL with a constant default: instant on any table size. The archive mirrors jobs'
-- columns by name (sql/retention.sql moves them).
ALTER TABLE {schema}.jobs ADD COLUMN unstarted_reclaims smallint NOT NULL DEFAULT 0;
ALTER TABLE {schema}.jobs_archive ADD COLUMN unstarted_reclaims smallint NOT NULL DEFAULT 0;

-- Jobs reclaimed unstarted before the upgrade carry their count, read along the reclaim
-- events' partial index (job_events_reclaim_idx): reclaims are few beside the other events.
UPDATE {schema}.jobs j
SET unstarted_reclaims = LEAST(c.n, 32767)
FROM (
    SELECT ev.job_id, count(*) AS n
    FROM {schema}.job_events ev
    WHERE ev.kind = 'reclaim' AND ev.detail ->> 'started' = 'false'
    GROUP BY ev.job_id
) c
WHERE j.id = c.job_id;
