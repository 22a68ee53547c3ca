-- How many dependencies of each waiting step had not ended yet, as the releases count them
-- down: a gate in front of the release rule, not the rule. A release that ends a parent only
-- decrements its children's counts, and reads a child's dependencies (all of them: a join
-- over thousands) only once its count is down to 0 or the parent ended without success. A
-- count off by a lost or repeated release only moves that read: too low, the rule runs
-- sooner and decides "wait"; too high, the leader's sweep decides the step.
CREATE TABLE {schema}.workflow_waits (
    child_id     uuid PRIMARY KEY,
    workflow_id  uuid NOT NULL REFERENCES {schema}.workflows (id) ON DELETE CASCADE,
    parents_left integer NOT NULL
);
CREATE INDEX workflow_waits_workflow_idx ON {schema}.workflow_waits (workflow_id);
