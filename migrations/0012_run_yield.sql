-- A queued run that reaches its soft deadline hands itself over: it stays Running, its last
-- events are appended and yielded_at is set in one statement, and its job is queued again. The
-- attempt that leases the job next takes the run back (compare-and-set yielded_at to NULL) and
-- goes on from the step ledger, in the same run and the same event log.
ALTER TABLE runs ADD COLUMN yielded_at timestamptz;
