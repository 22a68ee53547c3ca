-- Progress: the latest report of a running job, written by the worker that holds it.
--
-- Fenced like every worker write (leases.sql): status = 'running' AND locked_by_worker = the
-- worker AND attempt = the attempt it claimed; and progress_seq only grows, so a report
-- that arrives after a later one changes nothing. Neither column is indexed: the update
-- stays a heap-only one. No job_events row (docs/progress.md says why).

-- name: write_progress
-- $1 job, $2 worker, $3 attempt, $4 the report's seq, $5 its state (jsonb).
UPDATE {schema}.jobs j
SET progress_seq = $4::integer, progress_state = $5::jsonb, updated_at = clock_timestamp()
WHERE j.id = $1::uuid
  AND j.status IS NOT DISTINCT FROM 'running'  -- by primary key: see settle.sql
  AND j.locked_by_worker IS NOT DISTINCT FROM $2::uuid AND j.attempt = $3::integer
  AND j.progress_seq < $4::integer
RETURNING j.id;
