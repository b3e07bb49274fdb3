-- `Idempotency-Key` records. Statements run with search_path set to the schema.
--
-- One row per (tenant, operation, key). A claim is one statement
-- (`sql::IDEMPOTENCY_CLAIM`): it inserts the row, or replaces one whose expires_at has
-- passed, or returns the live row; the primary key makes exactly one of concurrent
-- claimers win. complete() stores the response; release() deletes a row only while it
-- has none.
--
-- response_body is the stored response, which carries model output (user content), so it
-- is a protected value: bytea behind the one-byte header, like jobs.payload and
-- runs.input, bound to the row's identity (tenant, operation, key). request_hash is a
-- hex SHA-256 of the request, not content.
CREATE TABLE idempotency_keys (
    tenant_id       text        NOT NULL,
    operation       text        NOT NULL,
    key             text        NOT NULL,
    request_hash    text        NOT NULL,
    response_status integer     CHECK (response_status BETWEEN 0 AND 65535),
    response_body   bytea,
    created_at      timestamptz NOT NULL,
    completed_at    timestamptz,
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, operation, key),
    CHECK ((response_status IS NULL) = (response_body IS NULL)),
    CHECK ((response_status IS NULL) = (completed_at IS NULL))
);

-- Sweeping expired records.
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
