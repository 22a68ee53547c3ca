-- Who paused a queue, when and why: `taskq queues pause Q --reason R` records the operator
-- (OS user@host), the database's clock and the reason; `queues list` and the dashboard show
-- them. A resume clears all three. Queues paused before this migration show no note.
-- Adding nullable columns without defaults rewrites nothing: instant on any table size.

ALTER TABLE {schema}.queues
    ADD COLUMN paused_at timestamptz,
    ADD COLUMN paused_by text,
    ADD COLUMN pause_reason text;
