-- API keys. A key is `trk_<id>_<secret>`; only the SHA-256 of the whole key is stored
-- (key_hash), never the key. The id is the lookup prefix and unique across tenants: a key is
-- found by id first (authentication), and the row then says which tenant it belongs to.
-- Scopes are their serde names ("RunsWrite"). Nothing here is conversation content, so no
-- column is a protected value. Statements run with search_path set to the configured schema.

CREATE TABLE api_keys (
    id           text        PRIMARY KEY CHECK (id ~ '^[0-9a-f]{12}$'),
    tenant_id    text        NOT NULL,
    name         text        NOT NULL,
    key_hash     bytea       NOT NULL CHECK (octet_length(key_hash) = 32),
    scopes       text[]      NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz,
    rotated_at   timestamptz
);

CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, created_at DESC, id DESC);
