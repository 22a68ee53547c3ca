-- The archive partitioned by ranges of UTC days of expire_at: the archive expiry drops a
-- range's partitions once it has ended instead of deleting its rows one by one. The tables
-- built in 0001 become the default partitions and keep what they hold; nothing is copied
-- and the one lock held long is on the archive (never read or written by the hot path):
-- the index on id the partitioned table needs, built on the old table first, about half a
-- second per million archived jobs, while prunes of finished jobs wait.
-- Partitions are created ahead by the prune, for the days its jobs will expire on; a row
-- with no partition of its range lands in the default, whose rows the expiry deletes in
-- batches.
--
-- Archived attempts carry their job's expire_at, so they go to its partition and leave with
-- it; rows archived before this migration keep NULL there (they are in the default). The
-- foreign key to the archive goes: a partition of a referenced table cannot be dropped, and
-- the expiry deletes a job's attempts with it.

-- The archive's partitions of a time range, one row each: the range [starts, ends) of UTC
-- days whose expire_at it holds (its tables are jobs_archive_<starts> and
-- job_attempts_archive_<starts>, as YYYYMMDD), and how many jobs it holds, so the expiry
-- reports a dropped range without counting its rows (seconds for ten million). A row is
-- written in the transaction that makes the partitions and deleted in the one that drops
-- them; the prune adds each batch's count in the batch's transaction.
CREATE TABLE {schema}.archive_partitions (
    starts date PRIMARY KEY,
    ends   date NOT NULL,
    jobs   bigint NOT NULL DEFAULT 0,
    CHECK (starts < ends)
);

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

