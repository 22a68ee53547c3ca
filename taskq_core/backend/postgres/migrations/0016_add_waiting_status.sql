-- Workflows: a step whose dependencies have not allowed it yet waits in its own status, which
-- no dispatch index covers (they all read status = 'pending'). Its own file: a value added to
-- an enum cannot be used in the transaction that adds it (0017 uses it).
ALTER TYPE {schema}.job_status ADD VALUE IF NOT EXISTS 'waiting';
