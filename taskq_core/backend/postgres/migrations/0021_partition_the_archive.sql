-- The archive partitioned by day of expire_at (UTC): the archive expiry drops a day's
-- partitions once the day has ended instead of deleting its rows one by one. The tables
-- built in 0001 become the default partitions and keep what they hold; nothing is copied
-- and the one lock held long is on the archive (never read or written by the hot path):
-- the index on id the partitioned table needs, built on the old table first, about half a
-- second per million archived jobs, while prunes of finished jobs wait.
-- Day partitions are created ahead by the prune, for the days its jobs will expire on; a row
-- with no day partition lands in the default, whose rows the expiry deletes in batches.
--
-- Archived attempts carry their job's expire_at, so they go to the same day and leave with
-- it; rows archived before this migration keep NULL there (they are in the default). The
-- foreign key to the archive goes: a partition of a referenced table cannot be dropped, and
-- the expiry deletes a job's attempts with it.

-- How many jobs are archived to expire on each UTC day, wherever they are stored: the
-- expiry reports a dropped day's count from here instead of counting its rows (seconds for
-- a day of ten million). The prune adds each batch's count in the batch's transaction; the
-- expiry deletes a day's row with its partitions (or, for a day without partitions, whose
-- jobs the default's batches delete and count, once the day has ended). The jobs archived
-- so far are counted now: a read, taking no lock that stops a prune.
CREATE TABLE {schema}.archive_days (
    day  date PRIMARY KEY,
    jobs bigint NOT NULL DEFAULT 0
);
INSERT INTO {schema}.archive_days (day, jobs)
SELECT (a.expire_at AT TIME ZONE 'UTC')::date, count(*)
FROM {schema}.jobs_archive a
GROUP BY 1;

-- Not UNIQUE (a unique index on a partitioned table must hold the partition key), so the
-- primary key's index cannot stand for it.
CREATE INDEX jobs_archive_default_id_idx ON {schema}.jobs_archive (id);

ALTER TABLE {schema}.job_attempts_archive DROP CONSTRAINT job_attempts_archive_job_id_fkey;
ALTER TABLE {schema}.job_attempts_archive ADD COLUMN expire_at timestamptz;

ALTER TABLE {schema}.jobs_archive RENAME TO jobs_archive_default;
CREATE TABLE {schema}.jobs_archive (
    LIKE {schema}.jobs_archive_default INCLUDING DEFAULTS INCLUDING CONSTRAINTS
) PARTITION BY RANGE (expire_at);
CREATE INDEX jobs_archive_id_idx ON {schema}.jobs_archive (id);
ALTER TABLE {schema}.jobs_archive ATTACH PARTITION {schema}.jobs_archive_default DEFAULT;

ALTER TABLE {schema}.job_attempts_archive RENAME TO job_attempts_archive_default;
CREATE TABLE {schema}.job_attempts_archive (
    LIKE {schema}.job_attempts_archive_default INCLUDING DEFAULTS INCLUDING CONSTRAINTS
) PARTITION BY RANGE (expire_at);
CREATE INDEX job_attempts_archive_job_id_idx ON {schema}.job_attempts_archive (job_id);
ALTER TABLE {schema}.job_attempts_archive
    ATTACH PARTITION {schema}.job_attempts_archive_default DEFAULT;

