-- Skills written through the API: one row per version, the shape of agent_definitions. A
-- skill is text (markdown instructions and named text resources) kept as the definition's
-- JSON; code skills are never stored.

CREATE TABLE skill_definitions (
    tenant_id   text        NOT NULL,
    name        text        NOT NULL,
    version     integer     NOT NULL,
    definition  jsonb       NOT NULL,
    created_at  timestamptz NOT NULL,
    written_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
);
