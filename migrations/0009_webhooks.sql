-- Outbound webhooks: subscriptions and their delivery history. Statements run with
-- search_path set to the schema.
--
-- A subscription stores the NAME of the configuration key its signing secret is read from,
-- never the secret. `events` is the list of event names it receives; publishing reads the
-- enabled subscriptions of one tenant (webhook_subscriptions_enabled) and tests membership.
-- consecutive_failures counts failed deliveries in a row; reaching
-- Tracon:Webhooks:DisableAfterFailures turns `enabled` off and stamps disabled_at, in the
-- same UPDATE (sql::WEBHOOK_SETTLE).
CREATE TABLE webhook_subscriptions (
    tenant_id                 text        NOT NULL,
    id                        uuid        PRIMARY KEY,
    url                       text        NOT NULL,
    events                    text[]      NOT NULL,
    secret_configuration_name text        NOT NULL,
    headers                   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    description               text,
    enabled                   boolean     NOT NULL,
    consecutive_failures      integer     NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
    disabled_at               timestamptz,
    created_at                timestamptz NOT NULL,
    updated_at                timestamptz NOT NULL,
    UNIQUE (tenant_id, id)
);

CREATE INDEX webhook_subscriptions_tenant ON webhook_subscriptions (tenant_id, created_at, id);
-- Publishing: one indexed read per event, cheap when a tenant has no subscription.
CREATE INDEX webhook_subscriptions_enabled ON webhook_subscriptions (tenant_id) WHERE enabled;

-- One row per event and subscription, updated in place by every attempt. The body is not
-- here (it travels in the delivery job's protected payload) and neither is anything of the
-- receiver's answer beyond its status code: last_error_* are a stable code and a message
-- Tracon wrote.
CREATE TABLE webhook_deliveries (
    tenant_id          text        NOT NULL,
    id                 uuid        PRIMARY KEY,
    subscription_id    uuid        NOT NULL,
    event_id           uuid        NOT NULL,
    event_type         text        NOT NULL,
    status             text        NOT NULL CHECK (status IN ('Pending', 'Retrying', 'Succeeded', 'Failed')),
    attempts           integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_status_code   integer     CHECK (last_status_code BETWEEN 100 AND 999),
    last_error_code    text,
    last_error_message text,
    job_id             uuid,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    last_attempt_at    timestamptz,
    completed_at       timestamptz,
    FOREIGN KEY (tenant_id, subscription_id) REFERENCES webhook_subscriptions (tenant_id, id) ON DELETE CASCADE,
    CHECK ((last_error_code IS NULL) = (last_error_message IS NULL))
);

CREATE INDEX webhook_deliveries_subscription ON webhook_deliveries (tenant_id, subscription_id, created_at DESC, id DESC);
