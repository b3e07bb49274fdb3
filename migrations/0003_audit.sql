-- The audit trail: one hash chain per tenant. Entries are numbered 1, 2, … per tenant
-- (sequence), and each row's hash is SHA-256(previous entry's hash ‖ canonical entry), the
-- first entry chaining from 32 zero bytes. The hash is computed by the application
-- (tracon_core::audit::chain_hash), not here: an append takes a per-tenant advisory lock for
-- its transaction, reads the tenant's last (sequence, hash), and inserts the next entry, so
-- concurrent appends neither share nor skip a number; the primary key refuses a second row
-- with a sequence even if a writer skipped the lock. Verifying the chain recomputes every
-- hash in sequence order: an edited row breaks it, a deleted one leaves a gap.
--
-- before/after are the exact canonical JSON text that was hashed, so they are text, not
-- jsonb (which would reorder keys and reformat the text, and the entry would no longer hash
-- the same). Times are stored to the microsecond, which is what the hash covers. Secret
-- fields are masked before an entry is written, and nothing here is conversation content,
-- so no column is a protected value. Statements run with search_path set to the schema.

CREATE TABLE audit_entries (
    tenant_id   text        NOT NULL,
    sequence    bigint      NOT NULL CHECK (sequence > 0),
    at          timestamptz NOT NULL,
    actor       text        NOT NULL,
    action      text        NOT NULL,
    entity_type text        NOT NULL,
    entity_id   text        NOT NULL,
    before      text,
    after       text,
    hash        bytea       NOT NULL CHECK (octet_length(hash) = 32),
    PRIMARY KEY (tenant_id, sequence)
);

-- The list's most selective filter: one entity's history, newest first. (The primary key
-- already serves the unfiltered list and the chain walk.)
CREATE INDEX audit_entries_by_entity ON audit_entries (tenant_id, entity_type, entity_id, sequence DESC);
