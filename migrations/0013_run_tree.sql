-- Agents calling agents: a child run's row names its parent, its root and its depth (columns
-- since 0001). `GET /api/runs/{id}/tree` reads a tree by its root.
CREATE INDEX IF NOT EXISTS runs_tree ON runs (tenant_id, root_run_id, started_at) WHERE root_run_id IS NOT NULL;
