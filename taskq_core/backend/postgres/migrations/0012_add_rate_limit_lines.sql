-- The line of each rate limit's denied calls, fleet-wide.
--
-- A call denied by a token bucket or a sliding window is told when to come back: the next
-- place of the limit's line, one interval (1/rate, or window/limit) after the previous denied
-- call's place and never before a token or entry is free. `ends_at` is the place after the
-- last one given. Kept by the store (here, or in Redis beside the limit's state), the line is
-- shared by every worker: a backlog comes back at about the rate the limit admits it, and a
-- worker that starts while jobs denied by its predecessors are still scheduled queues behind
-- them, instead of bringing a second wave back at the same time (each return a claim, a
-- statement and a write). A line that ended is forgotten by the idle-state sweep.
CREATE TABLE {schema}.rate_limit_lines (
    key     text PRIMARY KEY,
    ends_at timestamptz NOT NULL
);
