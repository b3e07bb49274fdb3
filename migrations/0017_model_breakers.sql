-- The model providers' circuit breakers, one row per provider, shared by every instance (so
-- Lambda functions, Workers and local servers on one database agree). Not tenant-scoped: a
-- provider's endpoint and the host's credential belong to the installation.

CREATE TABLE model_breakers (
    provider             text        PRIMARY KEY,
    consecutive_failures integer     NOT NULL DEFAULT 0,
    opened_at            timestamptz,
    probe_until          timestamptz,
    updated_at           timestamptz NOT NULL
);
