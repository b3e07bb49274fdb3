-- The step ledger and run continuation. Statements run with search_path set to the schema.
--
-- A tool round writes, in one statement and only while its run is Running, the model step
-- that asked for the calls (the assistant's message, a protected value like event payloads)
-- and each call's start: a tool_calls row in status 'Started' that the call's ending later
-- overwrites. After a crash the ledger says which calls ended, which started without an
-- ending (outcome unknown) and which never started.
--
-- A continuation is a new run naming the interrupted one in continued_from_run_id; the
-- interrupted run names it back in continued_by_run_id, set once (compare-and-set on NULL),
-- and the unique index makes a second continuation of the same run impossible.
CREATE TABLE run_steps (
    tenant_id    text        NOT NULL,
    run_id       uuid        NOT NULL,
    step         integer     NOT NULL,
    message      bytea       NOT NULL,
    recorded_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, run_id, step),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, id) ON DELETE CASCADE
);

ALTER TABLE runs ADD COLUMN continued_from_run_id uuid;
ALTER TABLE runs ADD COLUMN continued_by_run_id uuid;
CREATE UNIQUE INDEX runs_continued_from ON runs (tenant_id, continued_from_run_id)
    WHERE continued_from_run_id IS NOT NULL;
