-- A tenant's own provider credentials (BYOK): the *name* of the configuration key that holds
-- its API key (never the key) and an optional endpoint of its own, per provider; and the
-- providers a tenant's agents may call (no row: unrestricted).

CREATE TABLE tenant_provider_bindings (
    tenant_id                  text        NOT NULL,
    provider                   text        NOT NULL,
    api_key_configuration_name text        NOT NULL,
    endpoint                   text,
    updated_at                 timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, provider)
);

CREATE TABLE tenant_provider_egress (
    tenant_id         text        PRIMARY KEY,
    allowed_providers text[]      NOT NULL,
    updated_at        timestamptz NOT NULL
);
