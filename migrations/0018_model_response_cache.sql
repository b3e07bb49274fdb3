-- Cached model answers (model.responseCache): one row per tenant and key (a SHA-256 of
-- everything that shapes the answer), the answer a protected value like run events, kept
-- until expires_at. Expired rows are never read, and the tick removes them.

CREATE TABLE model_response_cache (
    tenant_id  text        NOT NULL,
    key        text        NOT NULL,
    answer     bytea       NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, key)
);

CREATE INDEX model_response_cache_expiry ON model_response_cache (expires_at);
