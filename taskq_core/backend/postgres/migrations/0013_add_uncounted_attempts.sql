-- Every body gets its own attempt number; the retry budget is counted apart.
--
-- Before, a claim whose body never started, a snooze and a retry-after that spent no budget
-- gave their attempt back (attempt - 1), so the next body ran under the same number. A body
-- whose start had not been written yet when its lease ran out looked unstarted to the
-- reclaim, so two bodies that both ran shared ctx.attempt, and the same worker claiming the
-- job again got the same (worker, attempt) lease, which the fences could not tell apart.
-- Now jobs.attempt only grows: +1 at every claim, never given back (an operator retry keeps
-- it too). It is ctx.attempt and, with the worker, the lease. What used to be given back is
-- counted here instead: attempts used = attempt - uncounted_attempts, and a transient job
-- has retries left while that is below max_attempts.
--
-- Existing rows start at 0: every attempt given back before the upgrade was taken off
-- `attempt` already, so `attempt` is their budget used, as it was. NOT NULL with a constant
-- default: instant on any table size. The archive mirrors jobs' columns by name
-- (sql/retention.sql moves them).
ALTER TABLE {schema}.jobs ADD COLUMN uncounted_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE {schema}.jobs_archive ADD COLUMN uncounted_attempts integer NOT NULL DEFAULT 0;
