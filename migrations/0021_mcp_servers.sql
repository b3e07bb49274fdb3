-- Tenants' remote MCP servers (the MCP client): the registration — a Streamable HTTP endpoint,
-- the *names* of the configuration keys its credential headers are read from (never a value),
-- whether its tools ask for approval — and what the server last said it offers, so a cold
-- instance has the catalog without asking the server. `discovery` is NULL until the first
-- discovery, and again after the registration changes.

CREATE TABLE mcp_servers (
    tenant_id                        text        NOT NULL,
    name                             text        NOT NULL,
    endpoint                         text        NOT NULL,
    authorization_configuration_key  text,
    header_configuration_keys        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    requires_approval                boolean     NOT NULL DEFAULT true,
    created_at                       timestamptz NOT NULL,
    updated_at                       timestamptz NOT NULL,
    discovery                        jsonb,
    PRIMARY KEY (tenant_id, name)
);
