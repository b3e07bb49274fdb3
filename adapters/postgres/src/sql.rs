//! Every statement the Postgres stores run — the one SQL text shared by the sqlx stores
//! (native hosts) and the tokio-postgres stores (Cloudflare Workers).
//!
//! Statements are unqualified: connections set `search_path` to the configured schema.
//! Every statement on a tenant-owned table filters by `tenant_id = $1`. Optional filters
//! use `($n::type IS NULL OR column = $n)` so each statement stays one fixed text.

// ---- definitions (agents, workflows, skills) -----------------------------------------------

/// The statements of one definition table: every kind of definition has its own table of the
/// same shape (one row per version), and these one texts.
pub struct DefinitionSql {
    pub get: &'static str,
    pub list: &'static str,
    /// Version 1; a duplicate is a unique violation.
    pub create: &'static str,
    /// The next version; no row when the definition does not exist.
    pub update: &'static str,
    pub delete: &'static str,
    pub versions: &'static str,
    pub version: &'static str,
}

macro_rules! definition_sql {
    ($table:literal) => {
        DefinitionSql {
            get: concat!(
                "SELECT version, definition, created_at, written_at FROM ",
                $table,
                " WHERE tenant_id = $1 AND name = $2 ORDER BY version DESC LIMIT 1"
            ),
            list: concat!(
                "SELECT DISTINCT ON (name) version, definition, created_at, written_at FROM ",
                $table,
                " WHERE tenant_id = $1 ORDER BY name, version DESC OFFSET $2 LIMIT $3"
            ),
            create: concat!(
                "INSERT INTO ",
                $table,
                " (tenant_id, name, version, definition, created_at, written_at) \
                VALUES ($1, $2, 1, $3, $4, $4)"
            ),
            update: concat!(
                "INSERT INTO ",
                $table,
                " (tenant_id, name, version, definition, created_at, written_at) \
                SELECT $1, $2, max(version) + 1, $3, min(created_at), $4 FROM ",
                $table,
                " WHERE tenant_id = $1 AND name = $2 HAVING count(*) > 0 RETURNING version, created_at"
            ),
            delete: concat!("DELETE FROM ", $table, " WHERE tenant_id = $1 AND name = $2"),
            versions: concat!(
                "SELECT version, definition, created_at, written_at FROM ",
                $table,
                " WHERE tenant_id = $1 AND name = $2 ORDER BY version DESC"
            ),
            version: concat!(
                "SELECT version, definition, created_at, written_at FROM ",
                $table,
                " WHERE tenant_id = $1 AND name = $2 AND version = $3"
            ),
        }
    };
}

pub const AGENT_DEFINITIONS: DefinitionSql = definition_sql!("agent_definitions");
pub const WORKFLOW_DEFINITIONS: DefinitionSql = definition_sql!("workflow_definitions");
pub const SKILL_DEFINITIONS: DefinitionSql = definition_sql!("skill_definitions");

// ---- runs --------------------------------------------------------------------------------

/// `$1` tenant … `$14` cancel_requested, `$15` input (protected, nullable).
pub const RUN_INSERT: &str = "INSERT INTO runs (tenant_id, id, agent_name, agent_version, status, started_at, session_id, \
     parent_run_id, root_run_id, depth, user_id, labels, heartbeat_at, cancel_requested, input, replay_of_run_id) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)";

/// [`RUN_INSERT`] while the tenant's definitions generation is still `$17`: no row when it
/// moved on (the parameters are cast: a `SELECT` list does not take its types from the columns).
pub const RUN_INSERT_AT: &str = "INSERT INTO runs (tenant_id, id, agent_name, agent_version, status, started_at, session_id, \
     parent_run_id, root_run_id, depth, user_id, labels, heartbeat_at, cancel_requested, input, replay_of_run_id) \
     SELECT $1::text, $2::uuid, $3::text, $4::integer, $5::text, $6::timestamptz, $7::text, $8::uuid, $9::uuid, \
     $10::integer, $11::text, $12::jsonb, $13::timestamptz, $14::boolean, $15::bytea, $16::uuid \
     WHERE COALESCE((SELECT generation FROM definition_generations WHERE tenant_id = $1), 0) = $17::bigint";

/// The tenant's definitions generation (no row: 0).
pub const DEFINITIONS_GENERATION: &str = "SELECT generation FROM definition_generations WHERE tenant_id = $1";

/// Closes the row and appends the run's last events (`$11`…`$14` as arrays) in one
/// statement, so the terminal event is never visible on an open row.
pub const RUN_FINISH: &str = "WITH ins AS (INSERT INTO run_events (tenant_id, run_id, sequence, event_type, occurred_at, payload) \
     SELECT $1, $2, u.seq, u.kind, u.at, u.payload \
     FROM unnest($11::bigint[], $12::text[], $13::timestamptz[], $14::bytea[]) AS u(seq, kind, at, payload) RETURNING 1) \
     UPDATE runs SET status = $3, ended_at = $4, duration_ms = $5, usage = $6, cost = $7, \
     model_provider = $8, model = $9, error = $10, heartbeat_at = $4 \
     WHERE tenant_id = $1 AND id = $2";

pub const RUN_GET: &str = "SELECT id, agent_name, agent_version, status, started_at, ended_at, duration_ms, usage, cost, \
     model_provider, model, error, session_id, parent_run_id, root_run_id, depth, user_id, labels, heartbeat_at, \
     cancel_requested, continued_from_run_id, continued_by_run_id, yielded_at, replay_of_run_id FROM runs WHERE tenant_id = $1 AND id = $2";

/// A call tree by its root `$2`: the root and every run under it, oldest first.
pub const RUN_TREE: &str = "SELECT id, agent_name, agent_version, status, started_at, ended_at, duration_ms, usage, cost, \
     model_provider, model, error, session_id, parent_run_id, root_run_id, depth, user_id, labels, heartbeat_at, \
     cancel_requested, continued_from_run_id, continued_by_run_id, yielded_at, replay_of_run_id FROM runs \
     WHERE tenant_id = $1 AND (id = $2 OR root_run_id = $2) ORDER BY depth, started_at, id LIMIT $3";

/// The run filter, on `$2`…`$8`: agent, status, session, user, labels (`@>`), from, to.
macro_rules! run_filter {
    () => {
        "tenant_id = $1 AND ($2::text IS NULL OR agent_name = $2) AND ($3::text IS NULL OR status = $3) \
         AND ($4::text IS NULL OR session_id = $4) AND ($5::text IS NULL OR user_id = $5) \
         AND labels @> $6::jsonb AND ($7::timestamptz IS NULL OR started_at >= $7) \
         AND ($8::timestamptz IS NULL OR started_at < $8)"
    };
}

pub const RUN_LIST: &str = concat!(
    "SELECT id, agent_name, agent_version, status, started_at, ended_at, duration_ms, usage, cost, \
     model_provider, model, error, session_id, parent_run_id, root_run_id, depth, user_id, labels, heartbeat_at, \
     cancel_requested, continued_from_run_id, continued_by_run_id, yielded_at, replay_of_run_id FROM runs WHERE ",
    run_filter!(),
    " ORDER BY started_at DESC, id DESC OFFSET $9 LIMIT $10"
);

/// Rows of `(dimension, key, runs, amount, tokens)`.
pub const RUN_STATS: &str = concat!(
    "WITH f AS (SELECT status, error, agent_name, user_id, labels, usage, cost FROM runs WHERE ",
    run_filter!(),
    ") \
     SELECT 'total' AS dim, '' AS key, count(*) AS n, NULL::float8 AS amount, NULL::bigint AS tokens FROM f \
     UNION ALL SELECT 'status', status, count(*), NULL, NULL FROM f GROUP BY status \
     UNION ALL SELECT 'error', error->>'errorClass', count(*), NULL, NULL FROM f WHERE error IS NOT NULL GROUP BY 2 \
     UNION ALL SELECT 'agent', agent_name, count(*), NULL, NULL FROM f GROUP BY 2 \
     UNION ALL SELECT 'user', user_id, count(*), NULL, NULL FROM f WHERE user_id IS NOT NULL GROUP BY 2 \
     UNION ALL SELECT 'label', l.key || ':' || l.value, count(*), NULL, NULL FROM f, jsonb_each_text(f.labels) AS l GROUP BY 2 \
     UNION ALL SELECT 'cost', cost->>'currency', count(*), round(sum((cost->>'totalCost')::numeric), 9)::float8, NULL FROM f \
         WHERE cost IS NOT NULL GROUP BY 2 \
     UNION ALL SELECT 'usage', '', count(*), NULL, NULL FROM f WHERE usage IS NOT NULL \
     UNION ALL SELECT 'tokens', 'input', 0, NULL, coalesce(sum((usage->>'inputTokens')::bigint), 0)::bigint FROM f \
     UNION ALL SELECT 'tokens', 'output', 0, NULL, coalesce(sum((usage->>'outputTokens')::bigint), 0)::bigint FROM f \
     UNION ALL SELECT 'tokens', 'total', 0, NULL, coalesce(sum((usage->>'totalTokens')::bigint), 0)::bigint FROM f"
);

pub const RUN_SET_INPUT: &str = "UPDATE runs SET input = $3 WHERE tenant_id = $1 AND id = $2";

pub const RUN_GET_INPUT: &str = "SELECT input FROM runs WHERE tenant_id = $1 AND id = $2";

/// `(status before, whether the flag was set)`; no status when the run does not exist.
/// The flag set, and — in the same statement — every listening instance told
/// (`NOTIFY tracon_runs, 'cancel:<id>'`, sent when the transaction commits), so the instance
/// executing the run stops it without ever reading the flag.
pub const RUN_CANCEL: &str = "WITH target AS (SELECT status FROM runs WHERE tenant_id = $1 AND id = $2), \
     upd AS (UPDATE runs SET cancel_requested = true WHERE tenant_id = $1 AND id = $2 AND status IN ('Running', 'Queued') RETURNING id) \
     SELECT (SELECT status FROM target) AS status, EXISTS (SELECT 1 FROM upd) AS requested, \
     (SELECT count(pg_notify('tracon_runs', 'cancel:' || id::text)) FROM upd) AS told";

/// A signal to every listening instance ([`tracon_core::runs::drain::Signal`]).
pub const RUN_SIGNAL: &str = "SELECT pg_notify('tracon_runs', $1)";

/// One row affected: the queued run is now running.
pub const RUN_START_QUEUED: &str = "UPDATE runs SET status = 'Running', started_at = $3, heartbeat_at = $3 \
     WHERE tenant_id = $1 AND id = $2 AND status = 'Queued' RETURNING cancel_requested";

/// Whether the run's executor is to stop: a cancel was asked, or the run was closed under it.
pub const RUN_CANCEL_FLAG: &str = "SELECT cancel_requested OR status NOT IN ('Running', 'Queued') \
     FROM runs WHERE tenant_id = $1 AND id = $2";

/// The heartbeat moved, and whether the executor is to stop (as [`RUN_CANCEL_FLAG`]; no row:
/// the run is gone).
pub const RUN_HEARTBEAT: &str = "WITH upd AS (UPDATE runs SET heartbeat_at = $3 \
     WHERE tenant_id = $1 AND id = $2 AND status = 'Running' RETURNING 1) \
     SELECT cancel_requested OR status NOT IN ('Running', 'Queued') FROM runs WHERE tenant_id = $1 AND id = $2";

/// Reconciliation's candidates, across tenants (a system scan, served by the partial index
/// `runs_running_heartbeat`): running runs not heard from since `$1`, oldest first, at most `$2`.
pub const RUN_STALE: &str = "SELECT r.tenant_id, r.id, r.started_at,      COALESCE((SELECT max(e.sequence) FROM run_events e WHERE e.tenant_id = r.tenant_id AND e.run_id = r.id), 0)      AS last_sequence FROM runs r WHERE r.status = 'Running' AND COALESCE(r.heartbeat_at, r.started_at) < $1      ORDER BY COALESCE(r.heartbeat_at, r.started_at), r.id LIMIT $2";

/// [`RUN_FINISH`] for a stale run: the row closes, and the events are written, only while it
/// is still running and not heard from since `$15`; no row affected otherwise.
pub const RUN_CLOSE_STALE: &str = "WITH upd AS (UPDATE runs SET status = $3, ended_at = $4, duration_ms = $5,      usage = $6, cost = $7, model_provider = $8, model = $9, error = $10, heartbeat_at = $4      WHERE tenant_id = $1 AND id = $2 AND status = 'Running' AND COALESCE(heartbeat_at, started_at) < $15 RETURNING 1)      INSERT INTO run_events (tenant_id, run_id, sequence, event_type, occurred_at, payload)      SELECT $1, $2, u.seq, u.kind, u.at, u.payload      FROM unnest($11::bigint[], $12::text[], $13::timestamptz[], $14::bytea[]) AS u(seq, kind, at, payload)      WHERE EXISTS (SELECT 1 FROM upd)";

// ---- run events ----------------------------------------------------------------------------

/// One batch in one round trip: the events (`$3`…`$6` as arrays) and the heartbeat (`$7`),
/// returning whether the executor is to stop (as [`RUN_CANCEL_FLAG`]) — the cancel check of
/// a run that writes its events costs no statement of its own. A missing run is a
/// foreign-key violation, a stored sequence a unique violation, and the whole statement is
/// written or nothing is.
pub const EVENTS_APPEND: &str = "WITH ins AS (INSERT INTO run_events (tenant_id, run_id, sequence, event_type, occurred_at, payload) \
     SELECT $1, $2, u.seq, u.kind, u.at, u.payload \
     FROM unnest($3::bigint[], $4::text[], $5::timestamptz[], $6::bytea[]) AS u(seq, kind, at, payload) RETURNING 1) \
     UPDATE runs SET heartbeat_at = $7 WHERE tenant_id = $1 AND id = $2 AND EXISTS (SELECT 1 FROM ins) \
     RETURNING cancel_requested OR status NOT IN ('Running', 'Queued')";

/// The `RunCompleted` events of the runs `$2` (a workflow's agents' answers, read back on resume).
pub const EVENTS_ANSWERS: &str = "SELECT run_id, sequence, occurred_at, payload FROM run_events \
     WHERE tenant_id = $1 AND run_id = ANY($2) AND event_type = 'RunCompleted'";

pub const EVENTS_READ: &str = "SELECT sequence, occurred_at, payload FROM run_events \
     WHERE tenant_id = $1 AND run_id = $2 AND sequence > $3 ORDER BY sequence LIMIT $4";

// ---- tool calls and the step ledger --------------------------------------------------------------

/// A tool round's ledger write, fenced by the run being `Running`: the model step (`$3`…`$5`,
/// all NULL for a round without one) and the calls' starts as arrays (`$6`…`$11`: call id,
/// tool name, effect, status, arguments, started at), and the run's events recorded before it
/// (`$12`…`$15` as [`EVENTS_APPEND`]'s arrays, written whether or not the run is live). Returns
/// one row, `written`.
pub const STEP_BEGIN: &str = "WITH live AS (SELECT 1 FROM runs WHERE tenant_id = $1 AND id = $2 AND status = 'Running' \
     FOR UPDATE), \
     ev AS (INSERT INTO run_events (tenant_id, run_id, sequence, event_type, occurred_at, payload) \
     SELECT $1, $2, u.seq, u.kind, u.at, u.payload \
     FROM unnest($12::bigint[], $13::text[], $14::timestamptz[], $15::bytea[]) AS u(seq, kind, at, payload)), \
     step AS (INSERT INTO run_steps (tenant_id, run_id, step, message, recorded_at) \
     SELECT $1, $2, $3, $4, $5 WHERE $3::integer IS NOT NULL AND EXISTS (SELECT 1 FROM live) RETURNING 1), \
     calls AS (INSERT INTO tool_calls (tenant_id, run_id, call_id, position, tool_name, effect, status, arguments, \
     started_at, duration_ms, timed_out) \
     SELECT $1, $2, u.call_id, (SELECT count(*) FROM tool_calls WHERE tenant_id = $1 AND run_id = $2) + u.n - 1, \
     u.tool_name, u.effect, u.status, u.arguments, u.started_at, 0, false \
     FROM unnest($6::text[], $7::text[], $8::text[], $9::text[], $10::bytea[], $11::timestamptz[]) \
     WITH ORDINALITY AS u(call_id, tool_name, effect, status, arguments, started_at, n) \
     WHERE EXISTS (SELECT 1 FROM live) \
     ON CONFLICT (tenant_id, run_id, call_id) DO UPDATE SET status = EXCLUDED.status, \
     arguments = EXCLUDED.arguments, started_at = EXCLUDED.started_at RETURNING 1) \
     SELECT EXISTS (SELECT 1 FROM live) AS written, (SELECT count(*) FROM step) AS steps, \
     (SELECT count(*) FROM calls) AS calls";

pub const EVENTS_LAST: &str =
    "SELECT COALESCE(max(sequence), 0) AS last FROM run_events WHERE tenant_id = $1 AND run_id = $2";

/// Appends the events (`$4`…`$7` as arrays), keeps the usage `$8` and marks the run yielded at `$3`, only while it
/// is running and not yielded. Rows updated.
pub const RUN_YIELD: &str = "WITH live AS (SELECT 1 FROM runs WHERE tenant_id = $1 AND id = $2 \
     AND status = 'Running' AND yielded_at IS NULL FOR UPDATE), \
     ins AS (INSERT INTO run_events (tenant_id, run_id, sequence, event_type, occurred_at, payload) \
     SELECT $1, $2, u.seq, u.kind, u.at, u.payload \
     FROM unnest($4::bigint[], $5::text[], $6::timestamptz[], $7::bytea[]) AS u(seq, kind, at, payload) \
     WHERE EXISTS (SELECT 1 FROM live) RETURNING 1) \
     UPDATE runs SET yielded_at = $3, heartbeat_at = $3, usage = $8 \
     WHERE tenant_id = $1 AND id = $2 AND EXISTS (SELECT 1 FROM live)";

pub const RUN_RESUME_YIELDED: &str = "UPDATE runs SET yielded_at = NULL, heartbeat_at = $3 \
     WHERE tenant_id = $1 AND id = $2 AND status = 'Running' AND yielded_at IS NOT NULL";

pub const STEP_LIST: &str =
    "SELECT step, message, recorded_at FROM run_steps WHERE tenant_id = $1 AND run_id = $2 ORDER BY step";

/// Opens a continuation (`$3` its id, `$4` agent, `$5` version, `$6` started at, `$7` session,
/// `$8` parent, `$9` root, `$10` depth, `$11` user, `$12` labels) of the ended run `$2` and
/// links `$2` to it, only when `$2` has ended and has no continuation yet. Rows inserted.
pub const RUN_CONTINUE: &str = "WITH link AS (UPDATE runs SET continued_by_run_id = $3 \
     WHERE tenant_id = $1 AND id = $2 AND continued_by_run_id IS NULL AND status NOT IN ('Running', 'Queued') \
     RETURNING 1) \
     INSERT INTO runs (tenant_id, id, agent_name, agent_version, status, started_at, session_id, parent_run_id, \
     root_run_id, depth, user_id, labels, heartbeat_at, cancel_requested, continued_from_run_id) \
     SELECT $1, $3, $4, $5, 'Running', $6, $7, $8, $9, $10, $11, $12, $6, false, $2 WHERE EXISTS (SELECT 1 FROM link)";

// ---- tool calls ------------------------------------------------------------------------------

/// A tool call's record, and the run's events recorded before it (`$18`…`$21` as
/// [`EVENTS_APPEND`]'s arrays) in the same statement.
pub const TOOL_UPSERT: &str = "WITH ev AS (INSERT INTO run_events (tenant_id, run_id, sequence, event_type, occurred_at, \
     payload) SELECT $1, $2, u.seq, u.kind, u.at, u.payload \
     FROM unnest($18::bigint[], $19::text[], $20::timestamptz[], $21::bytea[]) AS u(seq, kind, at, payload)) \
     INSERT INTO tool_calls (tenant_id, run_id, call_id, position, tool_name, effect, status, \
     arguments, result, error, omitted_bytes, started_at, duration_ms, timed_out, late_completed_at, late_duration_ms, \
     late_result, late_error) \
     VALUES ($1, $2, $3, (SELECT count(*) FROM tool_calls WHERE tenant_id = $1 AND run_id = $2), \
     $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) \
     ON CONFLICT (tenant_id, run_id, call_id) DO UPDATE SET tool_name = EXCLUDED.tool_name, effect = EXCLUDED.effect, \
     status = EXCLUDED.status, arguments = EXCLUDED.arguments, result = EXCLUDED.result, error = EXCLUDED.error, \
     omitted_bytes = EXCLUDED.omitted_bytes, started_at = EXCLUDED.started_at, duration_ms = EXCLUDED.duration_ms, \
     timed_out = EXCLUDED.timed_out, late_completed_at = EXCLUDED.late_completed_at, \
     late_duration_ms = EXCLUDED.late_duration_ms, late_result = EXCLUDED.late_result, late_error = EXCLUDED.late_error";

pub const TOOL_LATE: &str = "UPDATE tool_calls SET late_completed_at = $4, late_duration_ms = $5, late_result = $6, \
     late_error = $7 WHERE tenant_id = $1 AND run_id = $2 AND call_id = $3";

pub const TOOL_LIST: &str = "SELECT call_id, tool_name, effect, status, arguments, result, error, omitted_bytes, \
     started_at, duration_ms, timed_out, late_completed_at, late_duration_ms, late_result, late_error \
     FROM tool_calls WHERE tenant_id = $1 AND run_id = $2 ORDER BY position, started_at, call_id";

// ---- sessions ----------------------------------------------------------------------------------

pub const SESSION_GET: &str = "SELECT id, agent_name, version, item_count, created_at, updated_at, owner_user_id, \
     parent_session_id, parent_sequence FROM sessions WHERE tenant_id = $1 AND id = $2";

pub const SESSION_ITEMS: &str = "SELECT sequence, run_id, created_at, content FROM session_items \
     WHERE tenant_id = $1 AND session_id = $2 ORDER BY sequence";

/// `$2`: the owner to narrow to (before paging), or NULL for every session of the tenant.
pub const SESSION_LIST: &str = "SELECT id, agent_name, version, item_count, created_at, updated_at, owner_user_id, \
     parent_session_id, parent_sequence FROM sessions WHERE tenant_id = $1 \
     AND ($2::text IS NULL OR owner_user_id = $2) \
     ORDER BY updated_at DESC, id OFFSET $3 LIMIT $4";

/// A new session (generation 1, or a branch with its parent) and its items in one
/// statement; an existing id is a unique violation. `$10`/`$11`: item sequences and
/// contents; `$12`: items' run id.
pub const SESSION_CREATE: &str = "WITH s AS (INSERT INTO sessions (tenant_id, id, agent_name, version, item_count, \
     created_at, updated_at, owner_user_id, parent_session_id, parent_sequence) \
     VALUES ($1, $2, $3, 1, $4, $5, $5, $6, $7, $8) RETURNING id) \
     INSERT INTO session_items (tenant_id, session_id, sequence, run_id, created_at, content) \
     SELECT $1, s.id, u.seq, $9, $5, u.content FROM s, unnest($10::bigint[], $11::bytea[]) AS u(seq, content)";

/// The item count the generation `$3` has (no row when the generation moved on).
pub const SESSION_COUNT_AT: &str = "SELECT item_count FROM sessions WHERE tenant_id = $1 AND id = $2 AND version = $3";

/// Appends items only if the generation is still `$3`; returns the new generation and count.
pub const SESSION_APPEND: &str = "WITH s AS (UPDATE sessions SET version = version + 1, item_count = item_count + $4, \
     updated_at = $5, agent_name = $6 WHERE tenant_id = $1 AND id = $2 AND version = $3 \
     RETURNING id, version, item_count), \
     ins AS (INSERT INTO session_items (tenant_id, session_id, sequence, run_id, created_at, content) \
     SELECT $1, s.id, u.seq, $7, $5, u.content FROM s, unnest($8::bigint[], $9::bytea[]) AS u(seq, content) RETURNING 1) \
     SELECT version, item_count FROM s";

pub const SESSION_DELETE: &str = "DELETE FROM sessions WHERE tenant_id = $1 AND id = $2";

// ---- API keys ----------------------------------------------------------------------------------

/// The columns every key statement returns (both drivers read them by name).
macro_rules! key_columns {
    () => {
        "id, tenant_id, name, key_hash, scopes, created_at, expires_at, revoked_at, last_used_at, rotated_at"
    };
}

/// `$1` tenant, `$2` id … `$10` rotated_at; a taken id (in any tenant) is a unique violation.
pub const KEY_INSERT: &str = "INSERT INTO api_keys (tenant_id, id, name, key_hash, scopes, created_at, expires_at, \
     revoked_at, last_used_at, rotated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

/// By id alone, in any tenant: authentication, where the key is what proves the tenant.
/// With [`KEY_TOUCH`] the only key statements without a tenant (the port's `find` and
/// `touch` take none; the id is unique across tenants).
pub const KEY_FIND: &str = concat!("SELECT ", key_columns!(), " FROM api_keys WHERE id = $1");

pub const KEY_GET: &str = concat!("SELECT ", key_columns!(), " FROM api_keys WHERE tenant_id = $1 AND id = $2");

/// Revoked keys included, newest first.
pub const KEY_LIST: &str =
    concat!("SELECT ", key_columns!(), " FROM api_keys WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC");

/// Revokes once: a second revoke keeps the first time. No row when the tenant has no such key.
pub const KEY_REVOKE: &str = concat!(
    "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $3) WHERE tenant_id = $1 AND id = $2 RETURNING ",
    key_columns!()
);

/// New hash `$3` at `$4`, only on a key that is not revoked. Always one row: `found` says
/// whether the tenant has the key; the key's columns are NULL when nothing was rotated
/// (missing, or revoked when `found`). The update re-checks `revoked_at` on the newest row
/// version, so a revoke that lands first wins.
pub const KEY_ROTATE: &str = concat!(
    "WITH target AS (SELECT 1 FROM api_keys WHERE tenant_id = $1 AND id = $2), \
     upd AS (UPDATE api_keys SET key_hash = $3, rotated_at = $4 \
     WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL RETURNING ",
    key_columns!(),
    ") SELECT EXISTS (SELECT 1 FROM target) AS found, upd.* FROM (VALUES (1)) AS one (x) LEFT JOIN upd ON true"
);

/// Records a use by id (best effort; nothing when the key is gone).
pub const KEY_TOUCH: &str = "UPDATE api_keys SET last_used_at = $2 WHERE id = $1";

// ---- audit trail -------------------------------------------------------------------------------

/// The columns every audit statement returns (both drivers read them by name).
macro_rules! audit_columns {
    () => {
        "tenant_id, sequence, at, actor, action, entity_type, entity_id, before, after, hash"
    };
}

/// Serialises the appends of tenant `$1` until the transaction ends (an advisory lock, so
/// it also holds for the tenant's first entry, when there is no row to lock). The key
/// includes the schema so tenants of different schemas in one database do not wait on each
/// other (a NULL key would lock nothing, hence the `coalesce`). Run it as its own
/// statement, before [`AUDIT_LAST`]: at read committed, that statement's snapshot is then
/// taken after the previous holder committed.
pub const AUDIT_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended('tracon.audit:' || \
     coalesce(current_schema(), '') || ':' || $1, 0))";

/// The tenant's last `(sequence, hash)`; no row before its first entry.
pub const AUDIT_LAST: &str =
    "SELECT sequence, hash FROM audit_entries WHERE tenant_id = $1 ORDER BY sequence DESC LIMIT 1";

/// `$1` tenant, `$2` sequence … `$10` hash; a taken sequence is a unique violation.
pub const AUDIT_INSERT: &str = "INSERT INTO audit_entries (tenant_id, sequence, at, actor, action, entity_type, \
     entity_id, before, after, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

/// Newest first. Filters on `$2`…`$7`: entity type, entity id, action, actor, from (`at >=`),
/// to (`at <`); `$8` skip, `$9` take.
pub const AUDIT_LIST: &str = concat!(
    "SELECT ",
    audit_columns!(),
    " FROM audit_entries WHERE tenant_id = $1 AND ($2::text IS NULL OR entity_type = $2) \
     AND ($3::text IS NULL OR entity_id = $3) AND ($4::text IS NULL OR action = $4) \
     AND ($5::text IS NULL OR actor = $5) AND ($6::timestamptz IS NULL OR at >= $6) \
     AND ($7::timestamptz IS NULL OR at < $7) ORDER BY sequence DESC OFFSET $8 LIMIT $9"
);

/// Every entry of the tenant in chain order.
pub const AUDIT_CHAIN: &str =
    concat!("SELECT ", audit_columns!(), " FROM audit_entries WHERE tenant_id = $1 ORDER BY sequence");

// ---- approvals ---------------------------------------------------------------------------------

/// The columns every approval request statement returns (both drivers read them by name).
/// `arguments` is a protected value.
macro_rules! approval_columns {
    () => {
        "tenant_id, id, run_id, session_id, agent_name, call_id, tool_name, arguments, effect, requested_by, \
         created_at, expires_at, status, decided_at, decided_by, reason, resumed_run_id"
    };
}

/// Every request of one `create` call in one statement, as parallel arrays `$1`…`$17` in
/// the column order of `approval_columns!` (a tenant per row: each record carries its
/// own). All rows are written or none; a taken id is a unique violation.
pub const APPROVAL_INSERT: &str = concat!(
    "INSERT INTO approval_requests (",
    approval_columns!(),
    ") SELECT * FROM unnest($1::text[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], \
     $8::bytea[], $9::text[], $10::text[], $11::timestamptz[], $12::timestamptz[], $13::text[], \
     $14::timestamptz[], $15::text[], $16::text[], $17::uuid[])"
);

pub const APPROVAL_GET: &str =
    concat!("SELECT ", approval_columns!(), " FROM approval_requests WHERE tenant_id = $1 AND id = $2");

/// Pending and not expired at `$2`, oldest first, at most `$3` (the partial index
/// `approval_requests_pending` serves filter and order).
pub const APPROVAL_PENDING: &str = concat!(
    "SELECT ",
    approval_columns!(),
    " FROM approval_requests WHERE tenant_id = $1 AND status = 'Pending' AND expires_at > $2 \
     ORDER BY created_at, id LIMIT $3"
);

pub const APPROVAL_FOR_RUN: &str = concat!(
    "SELECT ",
    approval_columns!(),
    " FROM approval_requests WHERE tenant_id = $1 AND run_id = $2 ORDER BY created_at, id"
);

/// Records decision `$3` (status text) at `$4` by `$5` with reason `$6`, only on a request
/// that is still `Pending` and not expired at `$4`. Always one row: `found` says whether
/// the tenant has the request; the request's columns are NULL when nothing was decided
/// (missing, or decided/expired when `found`). The UPDATE is the whole decision: a second
/// decider blocks on the first one's row lock and then, at read committed, re-checks
/// `status = 'Pending'` on the row version the first one committed — and updates nothing.
pub const APPROVAL_DECIDE: &str = concat!(
    "WITH target AS (SELECT 1 FROM approval_requests WHERE tenant_id = $1 AND id = $2), \
     upd AS (UPDATE approval_requests SET status = $3, decided_at = $4, decided_by = $5, reason = $6 \
     WHERE tenant_id = $1 AND id = $2 AND status = 'Pending' AND expires_at > $4 RETURNING ",
    approval_columns!(),
    ") SELECT EXISTS (SELECT 1 FROM target) AS found, upd.* FROM (VALUES (1)) AS one (x) LEFT JOIN upd ON true"
);

/// Sets `resumed_run_id = $3` on every request of run `$2`, only when none is `Pending` and
/// none was claimed before; the rows it updated say whether this caller claimed (none: the
/// run has no requests, one is pending, or another caller claimed first).
///
/// Race-safety: `locked` takes every row of the run `FOR UPDATE`, in id order (so two
/// claimers never deadlock), and — at read committed — a row locked after waiting is read
/// at its newest committed version. The `NOT EXISTS` test therefore sees a concurrent
/// claim or decision that committed first, never a stale snapshot; and it is evaluated
/// (taking all the locks) before the first row is written. A second claimer waits for the
/// first one's locks, then sees `resumed_run_id` set and updates nothing. The outer
/// UPDATE carries no row-level test of its own, so it never skips a row on the strength of
/// a stale version: it writes all of the run's rows or none.
pub const APPROVAL_CLAIM_RESUME: &str = "WITH locked AS MATERIALIZED (SELECT status, resumed_run_id \
     FROM approval_requests WHERE tenant_id = $1 AND run_id = $2 ORDER BY id FOR UPDATE) \
     UPDATE approval_requests SET resumed_run_id = $3 WHERE tenant_id = $1 AND run_id = $2 \
     AND NOT EXISTS (SELECT 1 FROM locked WHERE status = 'Pending' OR resumed_run_id IS NOT NULL)";

// ---- approval rules ------------------------------------------------------------------------

macro_rules! rule_columns {
    () => {
        "tenant_id, id, tool_name, agent_name, arguments_hash, conditions, description, created_at, created_by"
    };
}

/// `$1`…`$9` in the column order of `rule_columns!`; a taken id is a unique violation.
pub const RULE_INSERT: &str =
    concat!("INSERT INTO approval_rules (", rule_columns!(), ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)");

/// Oldest first; only tool `$2`'s when it is not NULL.
pub const RULE_LIST: &str = concat!(
    "SELECT ",
    rule_columns!(),
    " FROM approval_rules WHERE tenant_id = $1 AND ($2::text IS NULL OR tool_name = $2) ORDER BY created_at, id"
);

pub const RULE_GET: &str = concat!("SELECT ", rule_columns!(), " FROM approval_rules WHERE tenant_id = $1 AND id = $2");

/// No row when the tenant has no such rule.
pub const RULE_DELETE: &str =
    concat!("DELETE FROM approval_rules WHERE tenant_id = $1 AND id = $2 RETURNING ", rule_columns!());

// ---- tenants -------------------------------------------------------------------------------

// Platform-wide records: the only statements with no tenant partition (the record *is* the
// tenant).

macro_rules! tenant_columns {
    () => {
        "id, display_name, created_at, updated_at"
    };
}

/// A taken id is a unique violation.
pub const TENANT_INSERT: &str =
    "INSERT INTO tenants (id, display_name, created_at, updated_at) VALUES ($1, $2, $3, $4)";

pub const TENANT_GET: &str = concat!("SELECT ", tenant_columns!(), " FROM tenants WHERE id = $1");

/// In id order (byte order: the column's collation is "C"), `$1` skip, `$2` take.
pub const TENANT_LIST: &str = concat!("SELECT ", tenant_columns!(), " FROM tenants ORDER BY id OFFSET $1 LIMIT $2");

/// No row when there is no such tenant.
pub const TENANT_UPDATE: &str =
    concat!("UPDATE tenants SET display_name = $2, updated_at = $3 WHERE id = $1 RETURNING ", tenant_columns!());

/// No row when there is no such tenant.
pub const TENANT_DELETE: &str = concat!("DELETE FROM tenants WHERE id = $1 RETURNING ", tenant_columns!());

// ---- quota notices -----------------------------------------------------------------------------

/// One row affected: this caller claimed the threshold; none: it was claimed before.
pub const QUOTA_NOTICE_CLAIM: &str = "INSERT INTO quota_notices (tenant_id, quota, period_start, threshold, claimed_at) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING";

// ---- jobs -------------------------------------------------------------------------------------

// Leasing and every lease-token update run by job id alone, in any tenant: a transport
// delivers an id, and whoever holds the token is the job's consumer. Reads on behalf of a
// tenant (`JOB_GET`, `JOB_LIST`, `JOB_CANCEL`) filter by tenant.

/// The columns every job statement returns (both drivers read them by name). `payload` is a
/// protected value.
macro_rules! job_columns {
    () => {
        "tenant_id, id, handler_key, payload, status, attempts, max_attempts, available_at, lease_owner, \
         lease_token, lease_expires_at, heartbeat_at, cancel_requested, result, error_code, error_message, run_id, \
         created_at, updated_at, completed_at"
    };
}

/// Whether a leasable job row is leased (`Queued` and available at `$2`, or `Running` with
/// its lease expired at `$2`) for one of the handler keys `$1`.
macro_rules! job_leasable {
    () => {
        "handler_key = ANY($1::text[]) AND ((status = 'Queued' AND available_at <= $2) \
         OR (status = 'Running' AND lease_expires_at <= $2))"
    };
}

/// What leasing does to each picked row (`$2` now, `$4` owner, `$5` lease expiry), in one
/// assignment whose every expression reads the row as it was: a row out of attempts, or
/// whose cancellation was asked, is closed (`Canceled` when asked, else `Failed` with the
/// attempts-exhausted error unless it has one) and keeps its attempts; any other row is
/// leased — `Running`, one more attempt, a fresh random token (`gen_random_uuid()`, v4).
macro_rules! job_lease_set {
    () => {
        "status = CASE WHEN cancel_requested THEN 'Canceled' WHEN attempts >= max_attempts THEN 'Failed' \
         ELSE 'Running' END, \
         attempts = CASE WHEN cancel_requested OR attempts >= max_attempts THEN attempts ELSE attempts + 1 END, \
         lease_owner = CASE WHEN cancel_requested OR attempts >= max_attempts THEN NULL ELSE $4 END, \
         lease_token = CASE WHEN cancel_requested OR attempts >= max_attempts THEN NULL ELSE gen_random_uuid() END, \
         lease_expires_at = CASE WHEN cancel_requested OR attempts >= max_attempts THEN NULL ELSE $5::timestamptz END, \
         heartbeat_at = CASE WHEN cancel_requested OR attempts >= max_attempts THEN heartbeat_at ELSE $2 END, \
         error_code = CASE WHEN NOT cancel_requested AND attempts >= max_attempts AND error_code IS NULL \
         THEN 'tracon.job.attempts-exhausted' ELSE error_code END, \
         error_message = CASE WHEN NOT cancel_requested AND attempts >= max_attempts AND error_code IS NULL \
         THEN 'The job''s lease expired on its last attempt.' ELSE error_message END, \
         updated_at = $2, \
         completed_at = CASE WHEN cancel_requested OR attempts >= max_attempts THEN $2 ELSE completed_at END"
    };
}

/// `$1`…`$20` in the column order of `job_columns!`; a taken id (in any tenant) is a
/// unique violation.
pub const JOB_INSERT: &str = concat!(
    "INSERT INTO jobs (",
    job_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)"
);

pub const JOB_GET: &str = concat!("SELECT ", job_columns!(), " FROM jobs WHERE tenant_id = $1 AND id = $2");

/// Newest first; only status `$2` / handler key `$3` when not NULL; `$4` skip, `$5` take.
pub const JOB_LIST: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM jobs WHERE tenant_id = $1 AND ($2::text IS NULL OR status = $2) \
     AND ($3::text IS NULL OR handler_key = $3) ORDER BY created_at DESC, id DESC OFFSET $4 LIMIT $5"
);

/// Takes up to `$3` leasable rows (see `job_leasable!`), oldest available first, and leases
/// or closes each (see `job_lease_set!`), in one statement. Returns every row it took:
/// those now `Running` are the leases; the others were closed.
///
/// Race-safety: `picked` locks its rows `FOR UPDATE SKIP LOCKED`, so a row another caller
/// is taking is skipped rather than waited for, and — at read committed — a row changed
/// since the snapshot is re-tested at its newest committed version before it is locked. A
/// row is therefore taken by exactly one caller, and the UPDATE writes only rows this
/// statement holds. The caller repeats the statement for the rest of its limit while rows
/// it took were closed, so closed rows do not count against the limit.
pub const JOB_LEASE: &str = concat!(
    "WITH picked AS MATERIALIZED (SELECT id AS picked_id FROM jobs WHERE ",
    job_leasable!(),
    " ORDER BY available_at, id LIMIT $3 FOR UPDATE SKIP LOCKED) \
     UPDATE jobs SET ",
    job_lease_set!(),
    " FROM picked WHERE id = picked.picked_id RETURNING ",
    job_columns!()
);

/// [`JOB_LEASE`] for the one job `$3` (a transport delivered it); no row when it is not
/// leasable now, or another caller holds its row lock.
pub const JOB_LEASE_ONE: &str = concat!(
    "WITH picked AS MATERIALIZED (SELECT id AS picked_id FROM jobs WHERE id = $3 AND ",
    job_leasable!(),
    " FOR UPDATE SKIP LOCKED) \
     UPDATE jobs SET ",
    job_lease_set!(),
    " FROM picked WHERE id = picked.picked_id RETURNING ",
    job_columns!()
);

/// Extends the lease of job `$1` held with token `$2` to `$3` at `$4`; returns
/// `cancel_requested`, no row when the lease is no longer this token's.
pub const JOB_HEARTBEAT: &str = "UPDATE jobs SET lease_expires_at = $3, heartbeat_at = $4, updated_at = $4 \
     WHERE id = $1 AND lease_token = $2 AND status = 'Running' RETURNING cancel_requested";

/// Ends the attempt of the lease named by `$1` (job) and `$2` (token) — only while it is
/// still that token's and the job runs. Each `JOB_FINISH_*` statement clears the lease.
macro_rules! job_finish {
    ($set:literal) => {
        concat!(
            "UPDATE jobs SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, ",
            $set,
            " WHERE id = $1 AND lease_token = $2 AND status = 'Running'"
        )
    };
}

/// Succeeded with result `$3` (NULL for none) at `$4`.
pub const JOB_FINISH_SUCCEEDED: &str = job_finish!(
    "status = 'Succeeded', result = $3, error_code = NULL, error_message = NULL, updated_at = $4, completed_at = $4"
);

/// Failed with error `$3`/`$4` at `$6`, to be tried again at `$5`: back to `Queued` while
/// attempts remain and cancellation was not asked; otherwise it ends (`Canceled` when
/// asked, else `Failed`).
pub const JOB_FINISH_RETRY: &str = job_finish!(
    "status = CASE WHEN attempts < max_attempts AND NOT cancel_requested THEN 'Queued' \
     WHEN cancel_requested THEN 'Canceled' ELSE 'Failed' END, \
     available_at = CASE WHEN attempts < max_attempts AND NOT cancel_requested THEN $5 ELSE available_at END, \
     completed_at = CASE WHEN attempts < max_attempts AND NOT cancel_requested THEN completed_at ELSE $6 END, \
     error_code = $3, error_message = $4, updated_at = $6"
);

/// Handed over to a later attempt at `$3`: queued again at once with the attempt given back
/// (`Canceled` when cancellation was asked).
pub const JOB_FINISH_REQUEUE: &str = job_finish!(
    "status = CASE WHEN cancel_requested THEN 'Canceled' ELSE 'Queued' END, \
     available_at = CASE WHEN cancel_requested THEN available_at ELSE $3 END, \
     completed_at = CASE WHEN cancel_requested THEN $3 ELSE completed_at END, \
     attempts = CASE WHEN cancel_requested THEN attempts ELSE greatest(attempts - 1, 0) END, \
     error_code = NULL, error_message = NULL, updated_at = $3"
);

/// Failed for good with error `$3`/`$4` at `$5` (`Canceled` when cancellation was asked).
pub const JOB_FINISH_FAILED: &str = job_finish!(
    "status = CASE WHEN cancel_requested THEN 'Canceled' ELSE 'Failed' END, error_code = $3, error_message = $4, \
     updated_at = $5, completed_at = $5"
);

/// The consumer stopped on a cancellation, at `$3`.
pub const JOB_FINISH_CANCELED: &str = job_finish!("status = 'Canceled', updated_at = $3, completed_at = $3");

/// Cancels job `$2` at `$3`: a queued one ends `Canceled`, a running one is flagged. Always
/// one row: `found` says whether the tenant has the job; the job's columns are NULL when
/// nothing changed (missing, or already ended when `found`). The UPDATE re-tests the status
/// on the newest row version, so a job leased or finished meanwhile is flagged or left.
pub const JOB_CANCEL: &str = concat!(
    "WITH target AS (SELECT 1 FROM jobs WHERE tenant_id = $1 AND id = $2), \
     upd AS (UPDATE jobs SET cancel_requested = true, \
     completed_at = CASE WHEN status = 'Queued' THEN $3 ELSE completed_at END, \
     status = CASE WHEN status = 'Queued' THEN 'Canceled' ELSE status END, updated_at = $3 \
     WHERE tenant_id = $1 AND id = $2 AND status IN ('Queued', 'Running') RETURNING ",
    job_columns!(),
    ") SELECT EXISTS (SELECT 1 FROM target) AS found, upd.* FROM (VALUES (1)) AS one (x) LEFT JOIN upd ON true"
);

/// Jobs a consumer could lease at `$1` that may lack a wake-up: retries whose backoff passed,
/// queued jobs created before `$2`, and expired leases; oldest first, at most `$3`.
pub const JOB_DUE: &str = "SELECT id FROM jobs WHERE (status = 'Queued' AND available_at <= $1 \
     AND (attempts > 0 OR created_at <= $2)) OR (status = 'Running' AND lease_expires_at <= $1) \
     ORDER BY available_at, id LIMIT $3";

// ---- schedules -----------------------------------------------------------------------------------

macro_rules! schedule_columns {
    () => {
        "tenant_id, id, name, target_name, message, parameters, run_at, cron, time_zone, enabled, next_run_at, \
         target_kind, last_run_at, last_run_id, last_error, created_at, updated_at"
    };
}

/// `$1`…`$17` in [`schedule_columns!`] order.
pub const SCHEDULE_INSERT: &str = concat!(
    "INSERT INTO schedules (",
    schedule_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)"
);

pub const SCHEDULE_GET: &str =
    concat!("SELECT ", schedule_columns!(), " FROM schedules WHERE tenant_id = $1 AND id = $2");

pub const SCHEDULE_LIST: &str =
    concat!("SELECT ", schedule_columns!(), " FROM schedules WHERE tenant_id = $1 ORDER BY name OFFSET $2 LIMIT $3");

/// Replaces the definition (`$3`…`$10`, `$12`), the next occurrence (`$11`) and `updated_at`
/// (`$13`); the last-run fields stay.
pub const SCHEDULE_UPDATE: &str = "UPDATE schedules SET name = $3, target_name = $4, message = $5, parameters = $6, \
     run_at = $7, cron = $8, time_zone = $9, enabled = $10, next_run_at = $11, target_kind = $12, updated_at = $13 \
     WHERE tenant_id = $1 AND id = $2";

pub const SCHEDULE_DELETE: &str = "DELETE FROM schedules WHERE tenant_id = $1 AND id = $2";

/// Due schedules of every tenant (a system scan, served by `schedules_due`).
pub const SCHEDULE_DUE: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM schedules WHERE enabled AND next_run_at <= $1 ORDER BY next_run_at, id LIMIT $2"
);

/// Takes the occurrence `$3`: one row affected only while it is still the stored one.
pub const SCHEDULE_ADVANCE: &str = "UPDATE schedules SET next_run_at = $4, last_run_at = $5, last_run_id = NULL, \
     last_error = NULL WHERE tenant_id = $1 AND id = $2 AND next_run_at = $3";

pub const SCHEDULE_OUTCOME: &str =
    "UPDATE schedules SET last_run_id = $3, last_error = $4 WHERE tenant_id = $1 AND id = $2";

// ---- idempotency keys --------------------------------------------------------------------------

/// Claims key `$1`/`$2`/`$3` (tenant, operation, key) for request hash `$4` at `$5` until
/// `$6`. Returns `claimed, request_hash, response_status, response_body`:
///
/// - `claimed` true: the INSERT wrote the row — the key was free, or its row had expired
///   (`expires_at <= $5`) and the `ON CONFLICT … DO UPDATE … WHERE` replaced it;
/// - `claimed` false: the live row (`expires_at > $5`) as this statement's snapshot has it,
///   in progress (no response) or completed.
///
/// Race-safety: the primary key decides. Of concurrent claimers one inserts; every other
/// `ON CONFLICT` waits for that transaction, then locks the committed row and re-tests the
/// `WHERE` on it — false, so it changes nothing. At most one claimer therefore gets
/// `claimed`, and an expired row is replaced by exactly one.
///
/// No row at all means the conflicting row was committed after this statement's snapshot
/// (every part of one statement reads the same snapshot, so the fallback SELECT cannot see
/// it even though `ON CONFLICT` waited for it), or it was replaced meanwhile. The caller
/// runs the statement again: its new snapshot sees the row, or the row is gone and it
/// claims it — see [`IDEMPOTENCY_CLAIM_ATTEMPTS`](crate::codec::IDEMPOTENCY_CLAIM_ATTEMPTS).
pub const IDEMPOTENCY_CLAIM: &str = "WITH claimed AS (INSERT INTO idempotency_keys \
     (tenant_id, operation, key, request_hash, response_status, response_body, created_at, completed_at, expires_at) \
     VALUES ($1, $2, $3, $4, NULL, NULL, $5, NULL, $6) \
     ON CONFLICT (tenant_id, operation, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, \
     response_status = NULL, response_body = NULL, created_at = EXCLUDED.created_at, completed_at = NULL, \
     expires_at = EXCLUDED.expires_at \
     WHERE idempotency_keys.expires_at <= $5 \
     RETURNING request_hash) \
     SELECT true AS claimed, request_hash, NULL::integer AS response_status, NULL::bytea AS response_body FROM claimed \
     UNION ALL \
     SELECT false, request_hash, response_status, response_body FROM idempotency_keys \
     WHERE tenant_id = $1 AND operation = $2 AND key = $3 AND expires_at > $5 AND NOT EXISTS (SELECT 1 FROM claimed)";

/// Stores response `$4` (status) / `$5` (protected body) at `$6`; no row affected when the
/// key has no record.
pub const IDEMPOTENCY_COMPLETE: &str = "UPDATE idempotency_keys \
     SET response_status = $4, response_body = $5, completed_at = $6 \
     WHERE tenant_id = $1 AND operation = $2 AND key = $3";

/// Deletes the record only while it has no response.
pub const IDEMPOTENCY_RELEASE: &str = "DELETE FROM idempotency_keys \
     WHERE tenant_id = $1 AND operation = $2 AND key = $3 AND completed_at IS NULL";

// ---- webhooks -----------------------------------------------------------------------------------

pub const WEBHOOK_INSERT: &str = "INSERT INTO webhook_subscriptions (tenant_id, id, url, events, \
     secret_configuration_name, headers, description, enabled, consecutive_failures, disabled_at, created_at, \
     updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

pub const WEBHOOK_GET: &str = "SELECT tenant_id, id, url, events, secret_configuration_name, headers, description, \
     enabled, consecutive_failures, disabled_at, created_at, updated_at FROM webhook_subscriptions \
     WHERE tenant_id = $1 AND id = $2";

pub const WEBHOOK_LIST: &str = "SELECT tenant_id, id, url, events, secret_configuration_name, headers, description, \
     enabled, consecutive_failures, disabled_at, created_at, updated_at FROM webhook_subscriptions \
     WHERE tenant_id = $1 ORDER BY created_at, id OFFSET $2 LIMIT $3";

/// Replaces what the API owns; turning a disabled subscription on (`$8`) resets its failure
/// count and `disabled_at` (the CASEs read the row's values before the update).
pub const WEBHOOK_UPDATE: &str = "UPDATE webhook_subscriptions SET \
     consecutive_failures = CASE WHEN $8 AND NOT enabled THEN 0 ELSE consecutive_failures END, \
     disabled_at = CASE WHEN $8 AND NOT enabled THEN NULL ELSE disabled_at END, \
     url = $3, events = $4, secret_configuration_name = $5, headers = $6, description = $7, enabled = $8, \
     updated_at = $9 WHERE tenant_id = $1 AND id = $2 \
     RETURNING tenant_id, id, url, events, secret_configuration_name, headers, description, \
     enabled, consecutive_failures, disabled_at, created_at, updated_at";

/// Deliveries go with it (`ON DELETE CASCADE`).
pub const WEBHOOK_DELETE: &str = "DELETE FROM webhook_subscriptions WHERE tenant_id = $1 AND id = $2";

/// The enabled subscriptions of tenant `$1` to event `$2` (partial index
/// `webhook_subscriptions_enabled`).
pub const WEBHOOK_SUBSCRIBED: &str = "SELECT tenant_id, id, url, events, secret_configuration_name, headers, \
     description, enabled, consecutive_failures, disabled_at, created_at, updated_at FROM webhook_subscriptions \
     WHERE tenant_id = $1 AND enabled AND $2 = ANY (events) ORDER BY created_at, id";

/// A finished delivery (`$3`: succeeded) counted in one statement: a success resets the
/// count, a failure adds one and disables at `$4` failures in a row (0: never), at `$5`.
pub const WEBHOOK_SETTLE: &str = "UPDATE webhook_subscriptions SET \
     consecutive_failures = CASE WHEN $3 THEN 0 ELSE consecutive_failures + 1 END, \
     enabled = CASE WHEN NOT $3 AND enabled AND $4 > 0 AND consecutive_failures + 1 >= $4 THEN false ELSE enabled END, \
     disabled_at = CASE WHEN NOT $3 AND enabled AND $4 > 0 AND consecutive_failures + 1 >= $4 THEN $5 ELSE disabled_at END, \
     updated_at = $5 WHERE tenant_id = $1 AND id = $2 \
     RETURNING tenant_id, id, url, events, secret_configuration_name, headers, description, \
     enabled, consecutive_failures, disabled_at, created_at, updated_at";

/// A delivery entry; its subscription must be the same tenant's (the foreign key names both).
pub const WEBHOOK_DELIVERY_INSERT: &str = "INSERT INTO webhook_deliveries (tenant_id, id, subscription_id, \
     event_id, event_type, status, attempts, last_status_code, last_error_code, last_error_message, job_id, \
     created_at, updated_at, last_attempt_at, completed_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)";

pub const WEBHOOK_DELIVERY_GET: &str = "SELECT tenant_id, id, subscription_id, event_id, event_type, status, \
     attempts, last_status_code, last_error_code, last_error_message, job_id, created_at, updated_at, \
     last_attempt_at, completed_at FROM webhook_deliveries WHERE tenant_id = $1 AND id = $2";

/// An attempt written over the entry (one row per event, however many attempts).
pub const WEBHOOK_DELIVERY_ATTEMPT: &str = "UPDATE webhook_deliveries SET status = $3, attempts = $4, \
     last_status_code = $5, last_error_code = $6, last_error_message = $7, updated_at = $8, \
     last_attempt_at = CASE WHEN $4 > 0 THEN $8 ELSE last_attempt_at END, \
     completed_at = CASE WHEN $3 IN ('Succeeded', 'Failed') THEN $8 ELSE NULL END \
     WHERE tenant_id = $1 AND id = $2";

pub const WEBHOOK_DELIVERIES: &str = "SELECT tenant_id, id, subscription_id, event_id, event_type, status, \
     attempts, last_status_code, last_error_code, last_error_message, job_id, created_at, updated_at, \
     last_attempt_at, completed_at FROM webhook_deliveries WHERE tenant_id = $1 AND subscription_id = $2 \
     ORDER BY created_at DESC, id DESC OFFSET $3 LIMIT $4";

/// Every tenant's subscriptions and the key names they store (see [`TRIGGER_SECRET_NAMES`]).
pub const WEBHOOK_SECRET_NAMES: &str = "SELECT tenant_id, id::text AS record, secret_configuration_name AS key_name \
     FROM webhook_subscriptions ORDER BY tenant_id, created_at, id";

// ---- triggers ----------------------------------------------------------------------------------

macro_rules! trigger_columns {
    () => {
        "name, target_kind, target_name, signing_secret_configuration_name, payload_mode, payload_path, enabled, \
         created_at, updated_at"
    };
}

/// The tenant's triggers in name (byte) order, `$2` skip, `$3` take.
pub const TRIGGER_LIST: &str =
    concat!("SELECT ", trigger_columns!(), " FROM triggers WHERE tenant_id = $1 ORDER BY name OFFSET $2 LIMIT $3");

pub const TRIGGER_GET: &str =
    concat!("SELECT ", trigger_columns!(), " FROM triggers WHERE tenant_id = $1 AND name = $2");

/// The accept endpoint's lookup: no row for a missing or disabled trigger.
pub const TRIGGER_FIND_ENABLED: &str =
    concat!("SELECT ", trigger_columns!(), " FROM triggers WHERE tenant_id = $1 AND name = $2 AND enabled");

/// Creates or replaces trigger `$2` of tenant `$1` (`$3`…`$8` its fields, `$9` created_at,
/// `$10` updated_at): a replacement keeps the stored created_at. Returns the stored row.
pub const TRIGGER_PUT: &str = concat!(
    "INSERT INTO triggers (tenant_id, name, target_kind, target_name, signing_secret_configuration_name, \
     payload_mode, payload_path, enabled, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
     ON CONFLICT (tenant_id, name) DO UPDATE SET target_kind = EXCLUDED.target_kind, \
     target_name = EXCLUDED.target_name, signing_secret_configuration_name = EXCLUDED.signing_secret_configuration_name, \
     payload_mode = EXCLUDED.payload_mode, payload_path = EXCLUDED.payload_path, enabled = EXCLUDED.enabled, \
     updated_at = EXCLUDED.updated_at RETURNING ",
    trigger_columns!()
);

/// One row affected when the trigger existed.
pub const TRIGGER_DELETE: &str = "DELETE FROM triggers WHERE tenant_id = $1 AND name = $2";

/// Every tenant's triggers and the key names they store (the start-up check of names
/// outside their tenant's partition; never on a request path).
pub const TRIGGER_SECRET_NAMES: &str = "SELECT tenant_id, name AS record, signing_secret_configuration_name AS key_name FROM triggers ORDER BY tenant_id, name";

// ---- MCP servers -------------------------------------------------------------------------------

macro_rules! mcp_server_columns {
    () => {
        "name, endpoint, authorization_configuration_key, header_configuration_keys, requires_approval, \
         created_at, updated_at, discovery, oauth"
    };
}

/// Tenant `$1`'s MCP servers by name, `$2` skipped, at most `$3`.
pub const MCP_SERVER_LIST: &str = concat!(
    "SELECT ",
    mcp_server_columns!(),
    " FROM mcp_servers WHERE tenant_id = $1 ORDER BY name OFFSET $2 LIMIT $3"
);

pub const MCP_SERVER_GET: &str =
    concat!("SELECT ", mcp_server_columns!(), " FROM mcp_servers WHERE tenant_id = $1 AND name = $2");

/// Creates or replaces server `$2` of tenant `$1` (`$3`…`$6` its fields, `$7` created_at, `$8`
/// updated_at, `$9` its oauth object): a replacement keeps the stored created_at and forgets the discovery, which
/// described the old registration. Returns the stored row.
pub const MCP_SERVER_PUT: &str = concat!(
    "INSERT INTO mcp_servers (tenant_id, name, endpoint, authorization_configuration_key, \
     header_configuration_keys, requires_approval, created_at, updated_at, oauth) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
     ON CONFLICT (tenant_id, name) DO UPDATE SET endpoint = EXCLUDED.endpoint, \
     authorization_configuration_key = EXCLUDED.authorization_configuration_key, \
     header_configuration_keys = EXCLUDED.header_configuration_keys, requires_approval = EXCLUDED.requires_approval, \
     updated_at = EXCLUDED.updated_at, oauth = EXCLUDED.oauth, discovery = NULL RETURNING ",
    mcp_server_columns!()
);

/// One row affected when the server existed.
pub const MCP_SERVER_DELETE: &str = "DELETE FROM mcp_servers WHERE tenant_id = $1 AND name = $2";

/// Stores discovery `$4` of server `$2` as registered at `$3`: nothing when the registration
/// was written since (its discovery would describe an endpoint no longer named).
pub const MCP_SERVER_DISCOVERY: &str =
    "UPDATE mcp_servers SET discovery = $4 WHERE tenant_id = $1 AND name = $2 AND updated_at = $3";

// ---- MCP OAuth ---------------------------------------------------------------------------------

/// A pending authorization: `$1` state digest, `$2` tenant, `$3` server, `$4` sealed verifier,
/// `$5` sealed issued client secret, `$6` details, `$7` expiry. A digest already pending is a
/// unique violation (a conflict).
pub const MCP_OAUTH_PENDING_PUT: &str = "INSERT INTO mcp_oauth_pending (state_digest, tenant_id, server, \
     code_verifier, client_secret, details, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// Removes pending authorizations that expired before `$1` (the browser never came back).
pub const MCP_OAUTH_PENDING_PURGE: &str = "DELETE FROM mcp_oauth_pending WHERE expires_at <= $1";

/// Takes pending authorization `$1`, whatever its expiry (the caller refuses an expired one):
/// one statement, so two callbacks with one state cannot both get it.
pub const MCP_OAUTH_PENDING_TAKE: &str = "DELETE FROM mcp_oauth_pending WHERE state_digest = $1 \
     RETURNING tenant_id, server, code_verifier, client_secret, details, expires_at";

macro_rules! mcp_oauth_token_columns {
    () => {
        "access_token, refresh_token, client_secret, expires_at, details, version, updated_at"
    };
}

pub const MCP_OAUTH_TOKENS_GET: &str =
    concat!("SELECT ", mcp_oauth_token_columns!(), " FROM mcp_oauth_tokens WHERE tenant_id = $1 AND server = $2");

/// Stores tokens of tenant `$1`'s server `$2` obtained by an authorization, replacing any:
/// `$3`…`$7` the columns, `$8` updated_at. The version goes on from the row replaced.
pub const MCP_OAUTH_TOKENS_PUT: &str = concat!(
    "INSERT INTO mcp_oauth_tokens (tenant_id, server, access_token, refresh_token, client_secret, expires_at, \
     details, version, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8) \
     ON CONFLICT (tenant_id, server) DO UPDATE SET access_token = EXCLUDED.access_token, \
     refresh_token = EXCLUDED.refresh_token, client_secret = EXCLUDED.client_secret, \
     expires_at = EXCLUDED.expires_at, details = EXCLUDED.details, version = mcp_oauth_tokens.version + 1, \
     updated_at = EXCLUDED.updated_at RETURNING ",
    mcp_oauth_token_columns!()
);

/// Replaces tokens of version `$9` with refreshed ones (`$3`…`$8` as in the put): no row when
/// another writer got there first.
pub const MCP_OAUTH_TOKENS_REPLACE: &str = concat!(
    "UPDATE mcp_oauth_tokens SET access_token = $3, refresh_token = $4, client_secret = $5, expires_at = $6, \
     details = $7, updated_at = $8, version = version + 1 \
     WHERE tenant_id = $1 AND server = $2 AND version = $9 RETURNING ",
    mcp_oauth_token_columns!()
);

pub const MCP_OAUTH_TOKENS_DELETE: &str = "DELETE FROM mcp_oauth_tokens WHERE tenant_id = $1 AND server = $2";

// ---- schema ------------------------------------------------------------------------------------

/// Whether a schema name is safe to splice into `CREATE SCHEMA` / `SET search_path`
/// (identifiers cannot be bound as parameters).
pub fn is_schema_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 63
        && chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

// ---- workflow checkpoints ------------------------------------------------------------------

// ---- circuit breakers ------------------------------------------------------------------------
// One row per provider, shared by every tenant (a provider is the installation's).

pub const BREAKER_GET: &str =
    "SELECT consecutive_failures, opened_at, probe_until FROM model_breakers WHERE provider = $1";

/// A counted failure at `$2` with threshold `$3`; `$4` says it was the half-open probe's (the
/// breaker opens again, the claim released — unless another caller closed it meanwhile). An
/// open breaker's `opened_at` stays otherwise.
pub const BREAKER_FAILED: &str = "INSERT INTO model_breakers AS b (provider, consecutive_failures, opened_at, probe_until, updated_at) \
     VALUES ($1, 1, CASE WHEN 1 >= $3::integer THEN $2::timestamptz END, NULL, $2::timestamptz) \
     ON CONFLICT (provider) DO UPDATE SET \
       consecutive_failures = b.consecutive_failures + 1, \
       opened_at = CASE WHEN $4::boolean AND b.opened_at IS NOT NULL THEN $2::timestamptz \
                        WHEN b.opened_at IS NOT NULL THEN b.opened_at \
                        WHEN b.consecutive_failures + 1 >= $3::integer THEN $2::timestamptz END, \
       probe_until = CASE WHEN $4::boolean AND b.opened_at IS NOT NULL THEN NULL ELSE b.probe_until END, \
       updated_at = $2::timestamptz \
     RETURNING consecutive_failures, opened_at, probe_until";

pub const BREAKER_SUCCEEDED: &str = "UPDATE model_breakers SET consecutive_failures = 0, opened_at = NULL, \
     probe_until = NULL, updated_at = $2 WHERE provider = $1";

/// Claims the half-open probe (`$4` until when) of a breaker open since at or before `$3`
/// whose previous claim (if any) expired before `$2`: one row for the one caller that wins.
pub const BREAKER_CLAIM_PROBE: &str = "UPDATE model_breakers SET probe_until = $4, updated_at = $2 \
     WHERE provider = $1 AND opened_at IS NOT NULL AND opened_at <= $3 \
       AND (probe_until IS NULL OR probe_until < $2)";

// ---- tenants' provider credentials and egress -------------------------------------------------

pub const BINDING_LIST: &str = "SELECT provider, api_key_configuration_name, endpoint, updated_at \
     FROM tenant_provider_bindings WHERE tenant_id = $1 ORDER BY provider";

pub const BINDING_PUT: &str = "INSERT INTO tenant_provider_bindings \
     (tenant_id, provider, api_key_configuration_name, endpoint, updated_at) VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (tenant_id, provider) DO UPDATE SET api_key_configuration_name = $3, endpoint = $4, updated_at = $5";

pub const BINDING_DELETE: &str = "DELETE FROM tenant_provider_bindings WHERE tenant_id = $1 AND provider = $2";

pub const EGRESS_GET: &str = "SELECT allowed_providers, updated_at FROM tenant_provider_egress WHERE tenant_id = $1";

pub const EGRESS_PUT: &str = "INSERT INTO tenant_provider_egress (tenant_id, allowed_providers, updated_at) \
     VALUES ($1, $2, $3) ON CONFLICT (tenant_id) DO UPDATE SET allowed_providers = $2, updated_at = $3";

pub const EGRESS_DELETE: &str = "DELETE FROM tenant_provider_egress WHERE tenant_id = $1";

// ---- the response cache ----------------------------------------------------------------------

pub const CACHE_GET: &str =
    "SELECT answer FROM model_response_cache WHERE tenant_id = $1 AND key = $2 AND expires_at > $3";

pub const CACHE_PUT: &str = "INSERT INTO model_response_cache (tenant_id, key, answer, expires_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, key) DO UPDATE SET answer = $3, expires_at = $4";

/// Up to `$2` answers of any tenant that expired before `$1`.
pub const CACHE_PURGE: &str = "DELETE FROM model_response_cache WHERE (tenant_id, key) IN \
     (SELECT tenant_id, key FROM model_response_cache WHERE expires_at < $1 LIMIT $2)";

pub const CHECKPOINT_SAVE: &str = "INSERT INTO workflow_checkpoints (tenant_id, run_id, id, seq, envelope, created_at, state) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

pub const CHECKPOINT_LIST: &str = "SELECT id, seq, envelope, created_at, state FROM workflow_checkpoints \
     WHERE tenant_id = $1 AND run_id = $2 ORDER BY seq";

/// The checkpoints of up to `$2` runs whose newest checkpoint is older than `$1`.
pub const CHECKPOINT_PURGE: &str = "DELETE FROM workflow_checkpoints c USING ( \
       SELECT tenant_id, run_id FROM workflow_checkpoints GROUP BY tenant_id, run_id \
       HAVING max(created_at) < $1 LIMIT $2) old \
     WHERE c.tenant_id = old.tenant_id AND c.run_id = old.run_id";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert!(is_schema_name("tracon"));
        assert!(is_schema_name("tracon_test_1"));
        for bad in ["", "Tracon", "1x", "a-b", "a;drop", "a b", &"a".repeat(64)] {
            assert!(!is_schema_name(bad), "{bad}");
        }
    }

    #[test]
    fn every_tenant_statement_filters_by_tenant() {
        let definitions = [AGENT_DEFINITIONS, WORKFLOW_DEFINITIONS, SKILL_DEFINITIONS]
            .into_iter()
            .flat_map(|d| [d.get, d.list, d.update, d.delete, d.versions, d.version]);
        for s in definitions.chain([
            CHECKPOINT_LIST,
            RUN_FINISH,
            RUN_GET,
            RUN_TREE,
            RUN_LIST,
            STEP_BEGIN,
            STEP_LIST,
            RUN_YIELD,
            RUN_RESUME_YIELDED,
            EVENTS_LAST,
            RUN_CONTINUE,
            RUN_STATS,
            RUN_SET_INPUT,
            RUN_GET_INPUT,
            RUN_CANCEL,
            RUN_CANCEL_FLAG,
            EVENTS_APPEND,
            EVENTS_READ,
            EVENTS_ANSWERS,
            CACHE_GET,
            BINDING_LIST,
            BINDING_DELETE,
            EGRESS_GET,
            EGRESS_DELETE,
            TOOL_LATE,
            TOOL_LIST,
            SESSION_GET,
            SESSION_ITEMS,
            SESSION_LIST,
            SESSION_COUNT_AT,
            SESSION_APPEND,
            SESSION_DELETE,
            KEY_GET,
            KEY_LIST,
            KEY_REVOKE,
            KEY_ROTATE,
            AUDIT_LAST,
            AUDIT_LIST,
            AUDIT_CHAIN,
            APPROVAL_GET,
            APPROVAL_PENDING,
            APPROVAL_FOR_RUN,
            APPROVAL_DECIDE,
            APPROVAL_CLAIM_RESUME,
            RULE_LIST,
            RULE_GET,
            RULE_DELETE,
            JOB_GET,
            JOB_LIST,
            JOB_CANCEL,
            IDEMPOTENCY_CLAIM,
            IDEMPOTENCY_COMPLETE,
            IDEMPOTENCY_RELEASE,
            TRIGGER_LIST,
            TRIGGER_GET,
            TRIGGER_FIND_ENABLED,
            TRIGGER_DELETE,
            MCP_SERVER_LIST,
            MCP_SERVER_GET,
            MCP_SERVER_DELETE,
            MCP_SERVER_DISCOVERY,
            MCP_OAUTH_TOKENS_GET,
            MCP_OAUTH_TOKENS_REPLACE,
            MCP_OAUTH_TOKENS_DELETE,
            SCHEDULE_GET,
            SCHEDULE_LIST,
            SCHEDULE_UPDATE,
            SCHEDULE_DELETE,
            SCHEDULE_ADVANCE,
            SCHEDULE_OUTCOME,
            RUN_HEARTBEAT,
        ]) {
            assert!(s.contains("tenant_id = $1"), "{s}");
        }
    }

    #[test]
    fn audit_appends_lock_per_tenant_for_the_transaction_only() {
        assert!(AUDIT_LOCK.contains("pg_advisory_xact_lock(") && AUDIT_LOCK.contains("|| $1"), "{AUDIT_LOCK}");
        assert!(AUDIT_INSERT.starts_with("INSERT INTO audit_entries (tenant_id,"), "{AUDIT_INSERT}");
    }

    #[test]
    fn approval_races_are_settled_inside_one_statement() {
        // A decision is one UPDATE conditioned on the row still being pending and unexpired.
        assert!(
            APPROVAL_DECIDE.contains("WHERE tenant_id = $1 AND id = $2 AND status = 'Pending' AND expires_at > $4")
        );
        // A claim locks every row of the run in one order and tests the locked versions.
        assert!(APPROVAL_CLAIM_RESUME.contains("AS MATERIALIZED"), "{APPROVAL_CLAIM_RESUME}");
        assert!(APPROVAL_CLAIM_RESUME.contains("ORDER BY id FOR UPDATE"), "{APPROVAL_CLAIM_RESUME}");
        assert!(APPROVAL_CLAIM_RESUME.contains("NOT EXISTS (SELECT 1 FROM locked "), "{APPROVAL_CLAIM_RESUME}");
        assert_eq!(APPROVAL_INSERT.matches("::").count(), 17, "one array per column");
    }

    #[test]
    fn job_leases_are_taken_and_settled_inside_one_statement() {
        for s in [JOB_LEASE, JOB_LEASE_ONE] {
            assert!(s.contains("AS MATERIALIZED") && s.contains("FOR UPDATE SKIP LOCKED"), "{s}");
            assert!(s.contains("gen_random_uuid()"), "{s}");
        }
        assert!(JOB_LEASE.contains("ORDER BY available_at, id LIMIT $3"), "{JOB_LEASE}");
        for s in [
            JOB_HEARTBEAT,
            JOB_FINISH_SUCCEEDED,
            JOB_FINISH_RETRY,
            JOB_FINISH_FAILED,
            JOB_FINISH_CANCELED,
            JOB_FINISH_REQUEUE,
        ] {
            assert!(s.contains("WHERE id = $1 AND lease_token = $2 AND status = 'Running'"), "{s}");
        }
        assert_eq!(JOB_INSERT.matches('$').count(), 20, "one parameter per column");
    }

    #[test]
    fn idempotency_claims_are_settled_inside_one_statement() {
        // Insert, or replace only an expired row; the live row otherwise.
        assert!(IDEMPOTENCY_CLAIM.starts_with("WITH claimed AS (INSERT INTO idempotency_keys"), "{IDEMPOTENCY_CLAIM}");
        assert!(
            IDEMPOTENCY_CLAIM.contains("ON CONFLICT (tenant_id, operation, key) DO UPDATE SET"),
            "{IDEMPOTENCY_CLAIM}"
        );
        assert!(IDEMPOTENCY_CLAIM.contains("WHERE idempotency_keys.expires_at <= $5"), "{IDEMPOTENCY_CLAIM}");
        assert!(IDEMPOTENCY_CLAIM.contains("expires_at > $5 AND NOT EXISTS (SELECT 1 FROM claimed)"));
        assert!(IDEMPOTENCY_RELEASE.ends_with("AND completed_at IS NULL"), "{IDEMPOTENCY_RELEASE}");
    }
}
