-- Workflows: their definitions (one row per version, the shape of agent_definitions) and the
-- checkpoints their runs write at super-step boundaries. A checkpoint's state (position,
-- pending work, the messages produced since the run's previous checkpoint) is content a
-- tenant's users wrote: bytea behind the one-byte protection header.

CREATE TABLE workflow_definitions (
    tenant_id   text        NOT NULL,
    name        text        NOT NULL,
    version     integer     NOT NULL,
    definition  jsonb       NOT NULL,
    created_at  timestamptz NOT NULL,
    written_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
);

CREATE TABLE workflow_checkpoints (
    tenant_id   text        NOT NULL,
    run_id      uuid        NOT NULL,
    id          uuid        NOT NULL,
    seq         integer     NOT NULL,
    envelope    integer     NOT NULL,
    created_at  timestamptz NOT NULL,
    state       bytea       NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq),
    UNIQUE (id)
);

-- Retention finds the runs whose newest checkpoint is old.
CREATE INDEX workflow_checkpoints_created ON workflow_checkpoints (created_at);
