-- Tracon's tables. Every tenant-owned table carries tenant_id, first in every key and every
-- index a lookup uses. Content a tenant's users wrote (conversation items, run input and
-- events, tool arguments and results) is stored as bytea behind a one-byte header, so at-rest
-- content protection can be turned on at any time: each value's own header says whether it
-- needs decrypting. Statements run with search_path set to the configured schema.

CREATE TABLE agent_definitions (
    tenant_id   text        NOT NULL,
    name        text        NOT NULL,
    version     integer     NOT NULL,
    definition  jsonb       NOT NULL,
    created_at  timestamptz NOT NULL,
    written_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
);

CREATE TABLE runs (
    tenant_id        text        NOT NULL,
    id               uuid        NOT NULL,
    agent_name       text        NOT NULL,
    agent_version    integer,
    status           text        NOT NULL,
    started_at       timestamptz NOT NULL,
    ended_at         timestamptz,
    duration_ms      bigint,
    usage            jsonb,
    cost             jsonb,
    model_provider   text,
    model            text,
    error            jsonb,
    session_id       text,
    parent_run_id    uuid,
    root_run_id      uuid,
    depth            integer     NOT NULL DEFAULT 0,
    user_id          text,
    labels           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    heartbeat_at     timestamptz,
    cancel_requested boolean     NOT NULL DEFAULT false,
    input            bytea,
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX runs_by_start   ON runs (tenant_id, started_at DESC, id DESC);
CREATE INDEX runs_by_session ON runs (tenant_id, session_id, started_at DESC) WHERE session_id IS NOT NULL;
CREATE INDEX runs_by_user    ON runs (tenant_id, user_id, started_at DESC) WHERE user_id IS NOT NULL;
CREATE INDEX runs_by_agent   ON runs (tenant_id, agent_name, started_at DESC);
CREATE INDEX runs_by_labels  ON runs USING gin (labels jsonb_path_ops);

CREATE TABLE run_events (
    tenant_id   text        NOT NULL,
    run_id      uuid        NOT NULL,
    sequence    bigint      NOT NULL,
    event_type  text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    payload     bytea       NOT NULL,
    PRIMARY KEY (tenant_id, run_id, sequence),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, id) ON DELETE CASCADE
);

CREATE TABLE tool_calls (
    tenant_id         text        NOT NULL,
    run_id            uuid        NOT NULL,
    call_id           text        NOT NULL,
    position          bigint      NOT NULL,
    tool_name         text        NOT NULL,
    effect            text,
    status            text        NOT NULL,
    arguments         bytea       NOT NULL,
    result            bytea,
    error             bytea,
    omitted_bytes     bigint,
    started_at        timestamptz NOT NULL,
    duration_ms       bigint      NOT NULL,
    timed_out         boolean     NOT NULL,
    late_completed_at timestamptz,
    late_duration_ms  bigint,
    late_result       bytea,
    late_error        bytea,
    PRIMARY KEY (tenant_id, run_id, call_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, id) ON DELETE CASCADE
);

CREATE TABLE sessions (
    tenant_id         text        NOT NULL,
    id                text        NOT NULL,
    agent_name        text,
    version           bigint      NOT NULL,
    item_count        bigint      NOT NULL,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    owner_user_id     text,
    parent_session_id text,
    parent_sequence   bigint,
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX sessions_by_update ON sessions (tenant_id, updated_at DESC, id);

CREATE TABLE session_items (
    tenant_id  text        NOT NULL,
    session_id text        NOT NULL,
    sequence   bigint      NOT NULL,
    run_id     uuid,
    created_at timestamptz NOT NULL,
    content    bytea       NOT NULL,
    PRIMARY KEY (tenant_id, session_id, sequence),
    FOREIGN KEY (tenant_id, session_id) REFERENCES sessions (tenant_id, id) ON DELETE CASCADE
);
