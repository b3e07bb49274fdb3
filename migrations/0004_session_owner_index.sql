-- A session listing narrowed to one owner (session ownership) pages newest update first
-- among that user's sessions: this index serves the filter and the order together, as
-- sessions_by_update does for the unfiltered listing. Statements run with search_path set
-- to the schema.

CREATE INDEX sessions_by_owner ON sessions (tenant_id, owner_user_id, updated_at DESC, id);
