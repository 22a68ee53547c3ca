-- What the workgroup supervisor saw of a child's end, and an operator's acknowledgement of a
-- silent worker.
--
-- exit_code / exit_signal: written by the supervisor when it reaps a child (any cause: a
-- clean exit, a crash, SIGKILL, its own stale kill), with the row set stopped at once, so no
-- view shows a dead child as running and then stale. A process that exited has one of the
-- two: its exit status, or the signal (SIGKILL) that ended it. Both NULL: nobody saw it end
-- (a worker run outside a workgroup, or one still running).
--
-- acknowledged_at / acknowledged_by: an operator has seen a stale worker's alert (who, as
-- user@host, and when on the database clock; why goes to the operator log). It covers the
-- silence it acknowledged: once the worker is heard from again (last_seen_at later than
-- acknowledged_at) it no longer applies, and the stale-worker cleanup deletes the row with it.
--
-- Nullable columns without a default: instant on any table size.
ALTER TABLE {schema}.workers
    ADD COLUMN exit_code       integer,
    ADD COLUMN exit_signal     text,
    ADD COLUMN acknowledged_at timestamptz,
    ADD COLUMN acknowledged_by text;
