-- Approvals and the tenant registry. Statements run with search_path set to the schema.
--
-- approval_requests: one row per tool call a stopped run waits on. Status is stored as
-- Pending, Approved or Denied; "Expired" is never stored (a Pending row past expires_at
-- reads as expired). A decision is one conditional UPDATE (still Pending, not yet expired),
-- so of two racing deciders exactly one wins. resumed_run_id is set on every row of a run
-- at once, by the run that resumes it, under row locks taken in id order. The call's
-- arguments are content a tenant's user (through the model) wrote, so they are a protected
-- value (bytea behind the one-byte header, like tool_calls.arguments), not jsonb.
CREATE TABLE approval_requests (
    tenant_id      text        NOT NULL,
    id             uuid        NOT NULL,
    run_id         uuid        NOT NULL,
    session_id     text,
    agent_name     text        NOT NULL,
    call_id        text        NOT NULL,
    tool_name      text        NOT NULL,
    arguments      bytea       NOT NULL,
    effect         text        NOT NULL,
    requested_by   text,
    created_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    status         text        NOT NULL CHECK (status IN ('Pending', 'Approved', 'Denied')),
    decided_at     timestamptz,
    decided_by     text,
    reason         text,
    resumed_run_id uuid,
    PRIMARY KEY (tenant_id, id)
);

-- The mailbox: a tenant's pending requests, oldest first.
CREATE INDEX approval_requests_pending ON approval_requests (tenant_id, created_at, id) WHERE status = 'Pending';
-- Every request of one run (deciding in-band, claiming the resumption).
CREATE INDEX approval_requests_by_run ON approval_requests (tenant_id, run_id, created_at, id);

-- Standing pre-approvals. conditions is the rule's condition list as JSON (operator rules,
-- not conversation content); '[]' when the rule carries none.
CREATE TABLE approval_rules (
    tenant_id      text        NOT NULL,
    id             uuid        NOT NULL,
    tool_name      text        NOT NULL,
    agent_name     text,
    arguments_hash text,
    conditions     jsonb       NOT NULL DEFAULT '[]'::jsonb,
    description    text,
    created_at     timestamptz NOT NULL,
    created_by     text        NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

-- The gatekeeper reads one tool's rules on every call that needs approval.
CREATE INDEX approval_rules_by_tool ON approval_rules (tenant_id, tool_name, created_at, id);

-- Tenant records: platform-wide, so no tenant_id column. Listed in id order; the "C"
-- collation makes that byte order (tenant ids are ASCII), the order every other host
-- lists them in, and lets the primary key serve it.
CREATE TABLE tenants (
    id           text COLLATE "C" PRIMARY KEY,
    display_name text        NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);

-- Quota thresholds already announced: the primary key is the claim, so each threshold of
-- each quota is announced once per period, whichever instance gets there first.
CREATE TABLE quota_notices (
    tenant_id    text        NOT NULL,
    quota        text        NOT NULL,
    period_start timestamptz NOT NULL,
    threshold    integer     NOT NULL,
    claimed_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, quota, period_start, threshold)
);
