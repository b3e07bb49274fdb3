-- OAuth for tenants' remote MCP servers. A registration may carry an `oauth` object (client
-- id, the NAME of the configuration key of its secret, scopes); the authorization an
-- administrator starts waits in `mcp_oauth_pending` for the browser to come back, and the
-- tokens it yields are kept in `mcp_oauth_tokens` so any instance (serverless: any request may
-- land on a new one) can use and refresh them.
--
-- Protected values (content protection, `adapters/postgres/src/protect.rs`): the PKCE verifier,
-- the tokens and a client secret the authorization server issued at registration — `bytea`,
-- sealed with AES-256-GCM and bound to their tenant, table, column and row when a key is
-- configured.

ALTER TABLE mcp_servers ADD COLUMN oauth jsonb;

-- Found by the SHA-256 of the callback's `state` (the state itself is never stored), taken
-- once, refused after `expires_at`.
CREATE TABLE mcp_oauth_pending (
    state_digest   text        PRIMARY KEY,
    tenant_id      text        NOT NULL,
    server         text        NOT NULL,
    code_verifier  bytea       NOT NULL,
    client_secret  bytea,
    details        jsonb       NOT NULL,
    expires_at     timestamptz NOT NULL
);

CREATE INDEX mcp_oauth_pending_expiry ON mcp_oauth_pending (expires_at);

-- One row per tenant and server. `version` is bumped by every write: a refresh replaces only
-- the version it read, so two instances refreshing at once do not lose a rotation.
CREATE TABLE mcp_oauth_tokens (
    tenant_id      text        NOT NULL,
    server         text        NOT NULL,
    access_token   bytea       NOT NULL,
    refresh_token  bytea,
    client_secret  bytea,
    expires_at     timestamptz,
    details        jsonb       NOT NULL,
    version        bigint      NOT NULL,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, server)
);
