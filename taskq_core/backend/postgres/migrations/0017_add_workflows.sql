-- Workflows: jobs that wait for other jobs (docs/workflows.md).
--
-- A step is an ordinary job whose metadata carries workflow_id and workflow_step (the
-- contract's names, no column of their own: a job outside a workflow pays nothing). A step
-- with dependencies is inserted 'waiting' and its scheduled_at holds the start its options
-- asked for; the release makes it 'pending' (or 'scheduled' while that start is ahead).
CREATE TABLE {schema}.workflows (
    id                  uuid PRIMARY KEY,
    name                text,
    status              text NOT NULL DEFAULT 'running'
                        CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at         timestamptz,
    cancel_requested_at timestamptz,
    metadata            jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX workflows_created_idx ON {schema}.workflows (created_at DESC, id DESC);
-- The leader's safety sweep walks the running ones; the prune the ended ones, oldest first.
CREATE INDEX workflows_running_idx ON {schema}.workflows (id) WHERE status = 'running';
CREATE INDEX workflows_finished_idx ON {schema}.workflows (finished_at)
    WHERE status <> 'running';

-- One row per dependency: child waits for parent. No foreign key to jobs (a key would make
-- every job's delete check this table); the workflow's own prune deletes its edges.
CREATE TABLE {schema}.workflow_edges (
    workflow_id uuid NOT NULL REFERENCES {schema}.workflows (id) ON DELETE CASCADE,
    parent_id   uuid NOT NULL,
    child_id    uuid NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX workflow_edges_child_idx ON {schema}.workflow_edges (child_id);
CREATE INDEX workflow_edges_workflow_idx ON {schema}.workflow_edges (workflow_id);

-- A workflow's steps by status (its end: "is any step not ended?"; its listing; its sweep):
-- a probe of one workflow's entries, never a scan. Jobs outside a workflow are not in it.
CREATE INDEX jobs_workflow_idx ON {schema}.jobs ((metadata->>'workflow_id'), status)
    WHERE metadata ? 'workflow_id';
