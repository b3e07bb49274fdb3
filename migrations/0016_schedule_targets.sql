-- A schedule runs an agent or a workflow: the kind beside the name (existing rows are agents').
ALTER TABLE schedules RENAME COLUMN agent_name TO target_name;
ALTER TABLE schedules ADD COLUMN target_kind text NOT NULL DEFAULT 'agent'
    CHECK (target_kind IN ('agent', 'workflow'));
