-- Inbound triggers: another system starts a queued run with a signed HTTP request.
-- Statements run with search_path set to the schema.
--
-- A trigger stores the NAME of the configuration key its signing secret is read from
-- (under Tracon:InboundTriggers:AllowedConfigurationPrefix), never the secret, so nothing
-- here is a protected value. The accept endpoint reads one row by (tenant_id, name) and
-- only while `enabled` (sql::TRIGGER_FIND_ENABLED); replays are refused through
-- idempotency_keys (operation `trigger:<name>`, the signature as the key), not here.
-- Names sort in byte order (COLLATE "C"), as the in-memory store lists them.
CREATE TABLE triggers (
    tenant_id                         text        NOT NULL,
    name                              text        COLLATE "C" NOT NULL,
    target_kind                       text        NOT NULL CHECK (target_kind IN ('agent', 'workflow')),
    target_name                       text        NOT NULL,
    signing_secret_configuration_name text        NOT NULL,
    payload_mode                      text        NOT NULL CHECK (payload_mode IN ('wholeBody', 'path')),
    payload_path                      text,
    enabled                           boolean     NOT NULL,
    created_at                        timestamptz NOT NULL,
    updated_at                        timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, name),
    CHECK ((payload_mode = 'path') = (payload_path IS NOT NULL))
);
