-- The durable job queue. Statements run with search_path set to the schema.
--
-- A job row is the truth; a queue transport only carries its id. A consumer leases a row
-- with one statement (`FOR UPDATE SKIP LOCKED`), so each leasable job goes to exactly one
-- caller; every later change names the lease token and is one conditional UPDATE
-- (`WHERE id = $1 AND lease_token = $2 AND status = 'Running'`), so a consumer whose lease
-- expired changes nothing.
--
-- The key is the id alone: jobs are leased across tenants (a transport delivers an id), and
-- an id is unique across tenants. Every read on behalf of a tenant filters by tenant_id.
--
-- payload can carry a tenant's user's content (a queued run's request holds the user's
-- message), so it is a protected value: bytea behind the one-byte header, like
-- runs.input. result is a handler's summary (ids, counts) and error_* is display-safe
-- text, so they are plain columns.
CREATE TABLE jobs (
    tenant_id        text        NOT NULL,
    id               uuid        PRIMARY KEY,
    handler_key      text        NOT NULL,
    payload          bytea       NOT NULL,
    status           text        NOT NULL CHECK (status IN ('Queued', 'Running', 'Succeeded', 'Failed', 'Canceled')),
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     integer     NOT NULL CHECK (max_attempts >= 0),
    available_at     timestamptz NOT NULL,
    lease_owner      text,
    lease_token      uuid,
    lease_expires_at timestamptz,
    heartbeat_at     timestamptz,
    cancel_requested boolean     NOT NULL DEFAULT false,
    result           jsonb,
    error_code       text,
    error_message    text,
    run_id           uuid,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    completed_at     timestamptz,
    CHECK ((error_code IS NULL) = (error_message IS NULL))
);

-- The lease scan: queued jobs by when they become available, and running jobs by when
-- their lease expires (both partial, so finished jobs never weigh on it).
CREATE INDEX jobs_queued ON jobs (available_at, id) WHERE status = 'Queued';
CREATE INDEX jobs_leased ON jobs (lease_expires_at) WHERE status = 'Running';
-- A tenant's job list, newest first.
CREATE INDEX jobs_by_created ON jobs (tenant_id, created_at DESC, id DESC);
