-- Schedules, and the scan reconciliation runs over runs. Statements run with search_path
-- set to the schema.
--
-- A schedule's next occurrence is stored; the tick takes due rows across tenants (the
-- partial index below) and moves each one's next_run_at forward with a compare-and-set on
-- the value it read, so an occurrence is taken once however many ticks race. message is a
-- tenant's user's content, so it is a protected value (bytea behind the one-byte header),
-- like runs.input. Exactly one timing: run_at (one-time) or cron with its IANA time zone.
CREATE TABLE schedules (
    tenant_id    text        NOT NULL,
    id           uuid        NOT NULL,
    name         text        NOT NULL,
    agent_name   text        NOT NULL,
    message      bytea       NOT NULL,
    parameters   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    run_at       timestamptz,
    cron         text,
    time_zone    text,
    enabled      boolean     NOT NULL DEFAULT true,
    next_run_at  timestamptz,
    last_run_at  timestamptz,
    last_run_id  uuid,
    last_error   text,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, name),
    CHECK ((run_at IS NULL) <> (cron IS NULL)),
    CHECK ((cron IS NULL) = (time_zone IS NULL))
);

CREATE INDEX schedules_due ON schedules (next_run_at) WHERE enabled AND next_run_at IS NOT NULL;

-- Reconciliation looks for running runs whose heartbeat expired, across tenants.
CREATE INDEX runs_running_heartbeat ON runs ((COALESCE(heartbeat_at, started_at))) WHERE status = 'Running';
