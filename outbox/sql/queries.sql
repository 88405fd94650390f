-- Every SQL statement hookrelay runs, named and commented, $n placeholders only.
-- Each block starts with `-- name: <name>`; the comment lines after it say why.
-- Blocks named `_...` are fragments, spliced into others as {{_name}}.
-- Loaded once by outbox/sql.py; only hookrelay.outbox.store runs them.

-- name: apply_schema_lock
-- Serialises concurrent `migrate` runs; IF NOT EXISTS alone races on catalogs.
SELECT pg_advisory_xact_lock(7240112);

-- name: migration_lock_timeout
-- After the schema lock, how long a migration waits for each lock before it gives up
-- and is tried again: deadlock_timeout / (2 × $1), $1 the number of tables its first
-- statements lock (at most 200 ms, at least 1 ms: 0 would mean no limit). A migration
-- takes every table lock in those statements, one table after another, so a running
-- transaction caught in a cycle with it began waiting at most $1 such waits before the
-- migration's last wait ends: well within the deadlock_timeout after which that
-- transaction would detect the deadlock and lose its work. The migration gives up
-- first. Running releases' statements queue behind a waiting lock no longer than that.
SELECT set_config('lock_timeout',
                  greatest(1, least(200, extract(epoch FROM current_setting('deadlock_timeout')
                                                            ::interval) * 1000
                                         / (2 * greatest(1, $1::int))))::int || 'ms',
                  true);

-- name: outwait_lock_timeout
-- One and a half deadlock_timeouts: the wait of a transaction that locks one table
-- and holds nothing else (no cycle can go through it), long enough for PostgreSQL to
-- cancel an autovacuum worker that holds the table.
SELECT set_config('lock_timeout',
                  (extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1500)::int
                  || 'ms',
                  true);

-- name: autovacuum_holds
-- Whether an autovacuum worker holds a lock on table $1 (a name).
SELECT EXISTS (
    SELECT 1
      FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'relation' AND l.relation = to_regclass($1) AND l.granted
       AND a.backend_type = 'autovacuum worker');

-- name: create_schema_version
-- The migration runner's bootstrap: the table as 0001 made it (0014 adds
-- `compatible`; schema.sql shows it whole).
CREATE TABLE IF NOT EXISTS schema_version (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: backend_pid
-- The process id of the server backend running this statement. A connection made
-- straight to PostgreSQL was told the same id at start-up (BackendKeyData); through a
-- pooler (PgBouncer, pgcat, Odyssey...) it was told the pooler's own made-up one.
SELECT pg_backend_pid();

-- name: schema_version_exists
SELECT to_regclass('schema_version') IS NOT NULL;

-- name: initial_tables_exist
-- 0001's first table: present means schema.sql was applied before migrations.
SELECT to_regclass('tenants') IS NOT NULL;

-- name: adopt_initial_schema
-- A database built from schema.sql before migrations existed: record 0001 as
-- applied (not re-run) when its tables are there and nothing is recorded yet.
INSERT INTO schema_version (version, name)
SELECT 1, 'initial'
 WHERE to_regclass('tenants') IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM schema_version);

-- name: applied_migrations
SELECT version, applied_at FROM schema_version ORDER BY version;

-- name: applied_migration_rows
-- Every applied migration with its compatibility flag. Read through to_jsonb so
-- the same statement works before 0014 added the column (no flag: false).
SELECT version, name, applied_at,
       COALESCE((to_jsonb(s) ->> 'compatible')::boolean, false) AS compatible
  FROM schema_version s
 ORDER BY version;

-- name: migration_applied
SELECT EXISTS (SELECT 1 FROM schema_version WHERE version = $1);

-- name: record_migration
INSERT INTO schema_version (version, name) VALUES ($1, $2);

-- name: mark_migration_compatible
-- After record_migration, for a migration whose file declares it compatible
-- (only from 0014 on, which adds the column).
UPDATE schema_version SET compatible = true WHERE version = $1;

-- name: master_key_check
SELECT key_id, check_enc FROM master_key_check WHERE id = 1;

-- name: lock_master_key_check
-- Held while a key is first recorded or rotated, so two processes starting at
-- once cannot each record a different key.
SELECT pg_advisory_xact_lock(7240113);

-- name: record_master_key_check
INSERT INTO master_key_check (id, key_id, check_enc) VALUES (1, $1, $2)
ON CONFLICT (id) DO UPDATE SET key_id = EXCLUDED.key_id, check_enc = EXCLUDED.check_enc;

-- name: all_secrets_for_update
-- Rotation of the master key: every secret, locked until the re-encryption commits.
SELECT id, tenant_id, secret_enc FROM signing_secrets FOR UPDATE;

-- name: reencrypt_secrets
UPDATE signing_secrets s SET secret_enc = v.enc
  FROM unnest($1::bigint[], $2::bytea[]) AS v(id, enc)
 WHERE s.id = v.id;

-- name: all_callback_headers_for_update
-- Rotation of the master key: every task's sealed callback headers, locked until
-- the re-encryption commits.
SELECT task_id, sealed FROM callback_headers FOR UPDATE;

-- name: reencrypt_callback_headers
UPDATE callback_headers h SET sealed = v.enc
  FROM unnest($1::text[], $2::bytea[]) AS v(id, enc)
 WHERE h.task_id = v.id;

-- name: insert_tenant
INSERT INTO tenants (id, name, api_key_hash, signature_scheme) VALUES ($1, $2, $3, $4)
RETURNING id, name, created_at;

-- name: insert_secret
-- $3: 'v1' (an HMAC secret) or 'v1a' (an Ed25519 private key, $4 its public key).
INSERT INTO signing_secrets (tenant_id, secret_enc, scheme, public_key) VALUES ($1, $2, $3, $4);

-- name: expire_secrets
-- Rotation: every secret still signing keeps doing so for the overlap, no longer.
UPDATE signing_secrets
   SET expires_at = LEAST(COALESCE(expires_at, 'infinity'), now() + make_interval(secs => $2))
 WHERE tenant_id = $1 AND (expires_at IS NULL OR expires_at > now());

-- name: bump_secret_version
-- Rotation: the tenant's row lock serialises concurrent rotations, and the new
-- version, committed with the new key, tells dispatchers their cache is stale.
-- The scheme says which kinds of key the rotation replaces.
UPDATE tenants SET secret_version = secret_version + 1 WHERE id = $1
RETURNING secret_version, signature_scheme;

-- name: tenant_exists
SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1);

-- name: tenant_by_key_hash
SELECT id, name, api_key_hash FROM tenants WHERE api_key_hash = $1;

-- name: list_tenants
-- Keyset pages in creation order; the secret count is of secrets that sign now.
SELECT t.id, t.name, t.created_at,
       (SELECT count(*) FROM signing_secrets s
         WHERE s.tenant_id = t.id AND (s.expires_at IS NULL OR s.expires_at > now())) AS secrets
  FROM tenants t
 WHERE $1::timestamptz IS NULL OR (t.created_at, t.id) > ($1, $2::text)
 ORDER BY t.created_at, t.id
 LIMIT $3;

-- name: rotate_api_key
-- The old hash is gone once this commits; the NOTIFY (also delivered at commit)
-- tells every API process to drop the keys it cached for this tenant.
WITH t AS (UPDATE tenants SET api_key_hash = $2 WHERE id = $1 RETURNING id)
SELECT id, pg_notify($3, id) FROM t;

-- name: active_secrets
-- Newest first: the first signature in the header is made with the newest key.
SELECT tenant_id, secret_enc, expires_at, scheme
  FROM signing_secrets
 WHERE tenant_id = ANY($1::text[]) AND (expires_at IS NULL OR expires_at > now())
 ORDER BY tenant_id, created_at DESC, id DESC;

-- name: signing_keys
-- A tenant's verification material for GET /v1/signing-keys: every key that
-- signs now, newest first; never the encrypted secret itself.
SELECT t.signature_scheme, s.scheme, s.public_key, s.created_at, s.expires_at
  FROM tenants t
  LEFT JOIN signing_secrets s
    ON s.tenant_id = t.id AND (s.expires_at IS NULL OR s.expires_at > now())
 WHERE t.id = $1
 ORDER BY s.created_at DESC, s.id DESC;

-- name: _oldest_xact_start
-- Start of the oldest transaction open against this database, other than ours
-- (NULL when none is). Rows stamped after it may still be joined by rows an
-- open transaction commits later; and while one stays open, no dead row can be
-- vacuumed. Shared by list_tasks and oldest_transaction.
(SELECT min(xact_start)
   FROM pg_stat_activity
  WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL);

-- name: insert_tasks
-- Submits, one or many, in ONE statement: hookrelay's API coalesces the submits that
-- arrive together (hookrelay.outbox.tasks.group_commit), so that a burst of them
-- shares one round trip and one commit; an executor's create_task sends a batch of
-- one inside its own transaction. $1 is one JSON array, an object per submit, in
-- order (hookrelay.outbox.store.tasks encodes it): one parameter however many rows,
-- encoded in one call, where an array per column cost the driver a conversion per
-- value. Its keys: id, tenant_id, type, input, callback_url, metadata, on_timeout
-- (JSON values), timeout_s and heartbeat_timeout_s (timeoutSeconds and
-- heartbeatTimeoutSeconds), host (the URL's destination key,
-- hookrelay.outbox.destinations; absent: none kept), sealed (the sealed callback
-- headers, base64) and header_names (their names joined by commas: HTTP header names
-- hold none), idem_key and idem_hash (an Idempotency-Key and its request hash,
-- base64), traceparent and tracestate (the submitter's W3C trace context, checked by
-- the caller), ordering_key (its orderingKey). Absent or null where a submit has none
-- of a thing. Text, cast here, so no connection needs a jsonb codec.
-- A keyed submit takes its key's advisory lock for the rest of the transaction, as
-- every writer of a key does; one held elsewhere (a submit with the same key still
-- in its transaction) makes that submit "in flight" and writes nothing for it. A key
-- already stored writes nothing either (ON CONFLICT, which sees keys committed after
-- this statement's snapshot too): the caller then reads the stored one. The other
-- submits of the statement are written either way. Each row back is one submit, by
-- its task id, with what only the database knows of a new task: its clock, and its
-- JSON values as jsonb stored them (as text: no codec needed); the caller has the
-- rest. created_at NULL: nothing was written for it.
WITH n AS MATERIALIZED (
    SELECT n.id, n.tenant_id, n.type, n.input, n.callback_url, n.metadata, n.timeout_s,
           n.heartbeat_timeout_s, n.on_timeout, n.host, decode(n.sealed, 'base64') AS sealed,
           n.header_names, n.idem_key, decode(n.idem_hash, 'base64') AS idem_hash,
           n.traceparent, n.tracestate, n.ordering_key
      FROM jsonb_to_recordset($1::text::jsonb)
        AS n(id text, tenant_id text, type text, input jsonb, callback_url text,
             metadata jsonb, timeout_s float8, heartbeat_timeout_s float8, on_timeout jsonb,
             host text, sealed text, header_names text, idem_key text, idem_hash text,
             traceparent text, tracestate text, ordering_key text)
), locked AS MATERIALIZED (
    -- MATERIALIZED: each key's lock is tried exactly once.
    SELECT n.id, pg_try_advisory_xact_lock(hashtextextended(n.tenant_id || ':' || n.idem_key, 42))
               AS got
      FROM n WHERE n.idem_key IS NOT NULL
), kept AS (
    INSERT INTO idempotency_keys (tenant_id, key, request_hash, task_id)
    SELECT n.tenant_id, n.idem_key, n.idem_hash, n.id FROM n JOIN locked l ON l.id = n.id
     WHERE l.got
    ON CONFLICT (tenant_id, key) DO NOTHING
    RETURNING task_id
), task AS (
    INSERT INTO tasks (id, tenant_id, type, input, callback_url, metadata, timeout_at,
                       heartbeat_timeout_s, on_timeout)
    SELECT n.id, n.tenant_id, n.type, n.input, n.callback_url, n.metadata,
           CASE WHEN n.timeout_s IS NULL THEN NULL
                ELSE now() + make_interval(secs => n.timeout_s) END,
           n.heartbeat_timeout_s, n.on_timeout
      FROM n
     WHERE n.idem_key IS NULL OR n.id IN (SELECT kept.task_id FROM kept)
    RETURNING id, created_at, timeout_at, input::text AS input, metadata::text AS metadata,
              on_timeout::text AS on_timeout
), hosted AS (
    -- The destination key, kept by the URL's origin so that finish_task needs no
    -- Python between its parts; an origin seen before is only looked up.
    INSERT INTO destination_keys (origin, host)
    SELECT DISTINCT ON (url_origin(n.callback_url)) url_origin(n.callback_url), n.host
      FROM n JOIN task ON task.id = n.id
     WHERE n.host IS NOT NULL
    ON CONFLICT (origin) DO NOTHING
), hdr AS (
    -- Callback headers in their own table (0019): a column on tasks would change
    -- what older releases' cached `SELECT *` statements return, failing them once
    -- in a transaction.
    INSERT INTO callback_headers (task_id, names, sealed)
    SELECT n.id, string_to_array(n.header_names, ','), n.sealed
      FROM n JOIN task ON task.id = n.id
     WHERE n.sealed IS NOT NULL
), traced AS (
    -- Only a submit that carries a trace context writes a trace row (0022); the
    -- webhooks of the others derive their trace-id from the event id.
    INSERT INTO task_traces (task_id, traceparent, tracestate)
    SELECT n.id, n.traceparent, n.tracestate
      FROM n JOIN task ON task.id = n.id
     WHERE n.traceparent IS NOT NULL
), ordered AS (
    -- Only a submit with an orderingKey writes a key row (0024), read back by
    -- _finish when its task's terminal event is queued.
    INSERT INTO task_ordering_keys (task_id, tenant_id, ordering_key)
    SELECT n.id, n.tenant_id, n.ordering_key
      FROM n JOIN task ON task.id = n.id
     WHERE n.ordering_key IS NOT NULL
)
SELECT n.id AS submitted, l.got IS FALSE AS in_flight, task.created_at, task.timeout_at,
       task.input, task.metadata, task.on_timeout
  FROM n
  LEFT JOIN locked l ON l.id = n.id
  LEFT JOIN task ON task.id = n.id;

-- name: _task_as_text
-- A task row with its jsonb columns as JSON text, for the statements an
-- executor's transaction runs (on whatever connection it holds): text reads the
-- same on every driver, with or without JSON codecs (decoded in
-- hookrelay.outbox.store.tasks). Every column of tasks, by name.
id, tenant_id, type, status, input::text AS input, result::text AS result,
error::text AS error, callback_url, metadata::text AS metadata, created_at, updated_at,
completed_at, timeout_at, version, event_id, delivery_status, delivery_attempts,
last_attempt_at, last_status_code, last_error, next_attempt_at, delivered_at,
progress::text AS progress, heartbeat_timeout_s, heartbeat_at, heartbeat_due_at,
on_timeout::text AS on_timeout,
-- (id unqualified: the one table or CTE each statement reads the task from)
(SELECT h.names FROM callback_headers h WHERE h.task_id = id) AS callback_header_names,
(SELECT k.ordering_key FROM task_ordering_keys k WHERE k.task_id = id) AS ordering_key

-- name: get_task
-- $2 NULL means "any tenant" (executor and ops); partners always pass theirs.
SELECT {{_task_as_text}} FROM tasks WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2);

-- name: list_tasks
-- Keyset pagination on (updated_at, id), served by tasks_tenant_updated.
-- updated_at is now(), the writing transaction's *start*, so a transaction
-- still open may yet commit rows that sort before ones already visible. A
-- reader that moved its cursor past those would never see them. So the page
-- stops at the horizon: the start of the oldest transaction still open in
-- this database. Everything before it is final; the rest shows up next poll.
SELECT t.*, (SELECT h.names FROM callback_headers h WHERE h.task_id = t.id) AS callback_header_names,
       (SELECT k.ordering_key FROM task_ordering_keys k WHERE k.task_id = t.id) AS ordering_key
  FROM tasks t
 WHERE tenant_id = $1
   AND ($2::text IS NULL OR status = $2)
   AND ($3::timestamptz IS NULL OR updated_at > $3)
   AND ($4::timestamptz IS NULL OR (updated_at, id) > ($4, $5::text))
   AND updated_at < COALESCE({{_oldest_xact_start}}, 'infinity')
 ORDER BY updated_at, id
 LIMIT $6;

-- name: _transition_set
-- A transition's changes to the task row and the state machine's guard, shared by
-- transition_task, finish_task and finish_tasks. The changes come from the row n:
-- n.status the new status; n.result and n.error as JSON text (cast here, so no
-- connection needs a jsonb codec); n.event_id the new event id of a terminal
-- transition, which also starts the delivery summary. The state machine lives in
-- the WHERE clause: the row changes only if its current status is one of n.allowed
-- (comma-separated), so two racing transitions cannot both win; n.tenant_id NULL
-- means any tenant (executor and ops).
UPDATE tasks
   SET status = n.status,
       result = COALESCE(n.result::jsonb, tasks.result),
       error = COALESCE(n.error::jsonb, tasks.error),
       updated_at = now(),
       completed_at = CASE WHEN n.event_id IS NULL THEN tasks.completed_at ELSE now() END,
       version = tasks.version + 1,
       event_id = COALESCE(n.event_id, tasks.event_id),
       delivery_status = CASE WHEN n.event_id IS NULL THEN tasks.delivery_status
                              ELSE 'pending' END,
       next_attempt_at = CASE WHEN n.event_id IS NULL THEN tasks.next_attempt_at
                              ELSE now() END,
       -- Starting is the first sign of life; the heartbeat clock runs only while running.
       heartbeat_at = CASE WHEN n.status = 'running' THEN now() ELSE tasks.heartbeat_at END,
       heartbeat_due_at = CASE WHEN n.status = 'running' AND tasks.heartbeat_timeout_s IS NOT NULL
                               THEN now() + make_interval(secs => tasks.heartbeat_timeout_s) END
  FROM n
 WHERE tasks.id = n.id AND tasks.status = ANY(string_to_array(n.allowed, ','))
   -- The rows by their key, whatever the planner guesses of n (a function of the
   -- statement's JSON, which it takes for 100 rows): joined to n alone, a plan
   -- kept for reuse hashed every task of a small table, and a fresh plan per
   -- statement cost more than the statement.
   AND tasks.id = ANY(ARRAY(SELECT n.id FROM n))
   AND (n.tenant_id IS NULL OR tasks.tenant_id = n.tenant_id)

-- name: _one_transition
-- The row n of a single transition: $1 the task, $2 its new status, $3 and $4 result
-- and error, $5 the new event id, $6 the statuses it may leave (comma-separated), $7
-- the tenant.
n AS (SELECT $1::text AS id, $2::text AS status, $3::text AS result, $4::text AS error,
             $5::text AS event_id, $6::text AS allowed, $7::text AS tenant_id, 0 AS ord)

-- name: transition_task
-- The guarded transition alone; the event of a terminal one is then written by
-- insert_outbox, in the same transaction. Only for a task submitted before 0018,
-- which has no destination key in destination_keys: finish_task does the rest in
-- one statement.
WITH {{_one_transition}}, t AS (
    {{_transition_set}}
    RETURNING tasks.*
)
SELECT {{_task_as_text}} FROM t;

-- name: _event_body
-- The webhook body of the terminal event of t (the task as the transition leaves
-- it): {"type", "timestamp", "data"}, data being the task resource without its
-- delivery summary, fields in the order of hookrelay.outbox.models.TaskData, and
-- updatedAt the completion time, as at commit. Written by concatenation, which is
-- cheap (json_build_object's output would need a rewrite to lose its blanks, and a
-- regexp_replace over the body cost 50 times as much): the body's own objects are
-- compact, a jsonb value (input, result, error, metadata, onTimeout, progress) is
-- written as PostgreSQL writes jsonb ({"a": 1, "b": [1, 2]}), strings are escaped by
-- to_json as Python's json.dumps escapes them, and a float as Python writes it.
-- hookrelay.outbox.tasks.state_changes.event_body writes the same bytes from a Task
-- (but for a number PostgreSQL spells otherwise: 0.0000001 where Python writes 1e-07).
-- Built once, when the event commits, and stored: every attempt sends these bytes.
'{"type":' || to_json('task.' || t.status)::text
    || ',"timestamp":' || to_json(webhook_time(t.completed_at))::text
    || ',"data":{"id":' || to_json(t.id)::text
    || ',"type":' || to_json(t.type)::text
    || ',"status":' || to_json(t.status)::text
    || ',"input":' || COALESCE(t.input::text, 'null')
    || ',"result":' || COALESCE(t.result::text, 'null')
    || ',"error":' || COALESCE(t.error::text, 'null')
    || ',"callbackUrl":' || to_json(t.callback_url)::text
    || ',"metadata":' || COALESCE(t.metadata::text, 'null')
    || ',"createdAt":' || to_json(webhook_time(t.created_at))::text
    || ',"updatedAt":' || to_json(webhook_time(t.completed_at))::text
    || ',"completedAt":' || to_json(webhook_time(t.completed_at))::text
    || ',"timeoutAt":' || COALESCE(to_json(webhook_time(t.timeout_at))::text, 'null')
    -- 30.0 where PostgreSQL writes 30
    || ',"heartbeatTimeoutSeconds":' || COALESCE(CASE
           WHEN t.heartbeat_timeout_s = trunc(t.heartbeat_timeout_s)
            AND abs(t.heartbeat_timeout_s) < 1e15
           THEN trunc(t.heartbeat_timeout_s)::bigint::text || '.0'
           ELSE t.heartbeat_timeout_s::text END, 'null')
    || ',"onTimeout":' || COALESCE(t.on_timeout::text, 'null')
    || ',"progress":' || COALESCE(t.progress::text, 'null')
    || ',"version":' || t.version::text
    -- The names of its callback headers (0019), never their values; jsonb's text, as
    -- the other JSON values ("a", "b").
    || ',"callbackHeaders":' || COALESCE(
           (SELECT to_jsonb(h.names)::text FROM callback_headers h WHERE h.task_id = t.id),
           '[]')
    -- Its orderingKey (0024), or null.
    || ',"orderingKey":' || COALESCE(
           (SELECT to_json(k.ordering_key)::text FROM task_ordering_keys k WHERE k.task_id = t.id),
           'null')
    || '}}'

-- name: _place_in_keys
-- Ordered delivery (0024): each keyed event's place in its key's queue, for the rows
-- of the CTE `keyed` (ord; tenant_id and ordering_key; pos, its place among this
-- statement's events of the key; n, how many those are). The key's row in
-- ordering_keys hands out n places after its last one and counts them pending. Its
-- row lock, taken here and held until commit, makes a later writer of the key wait:
-- places follow commit order. ON CONFLICT reads the key's row as last committed,
-- past this statement's snapshot, so what a writer committed while this one waited
-- is counted. An event is parked (next_attempt_at 'infinity', out of every claim's
-- way) unless it is the only one of its key waiting; the outcome that takes the one
-- before it out of the outbox makes it due (record_outcomes). A parked row is also
-- leased until 'infinity' (with no token): a dispatcher of an older release, whose
-- claims and probes know nothing of parking, skips it as a row in flight. Keys are written in
-- order, so two writers of the same keys cannot deadlock.
sequenced AS (
    INSERT INTO ordering_keys AS o (tenant_id, ordering_key, last_seq, pending)
    SELECT k.tenant_id, k.ordering_key, max(k.n), max(k.n)::int
      FROM keyed k
     GROUP BY k.tenant_id, k.ordering_key
     ORDER BY k.tenant_id, k.ordering_key
    ON CONFLICT (tenant_id, ordering_key) DO UPDATE
       SET last_seq = o.last_seq + EXCLUDED.last_seq, pending = o.pending + EXCLUDED.pending
    RETURNING o.tenant_id, o.ordering_key, o.last_seq, o.pending
), placed AS (
    SELECT k.ord, k.ordering_key, s.last_seq - k.n + k.pos AS seq,
           s.pending - k.n + k.pos > 1 AS parked
      FROM keyed k
      JOIN sequenced s ON s.tenant_id = k.tenant_id AND s.ordering_key = k.ordering_key
)

-- name: _finish
-- A transition of each row n and, when terminal (n.event_id its new event id), its
-- event and outbox row, all in the statement that holds this fragment. The event
-- body is built here from the row the UPDATE returns (_event_body), stored once in
-- events and never changed; the outbox row carries the destination key computed at
-- submit (destination_keys, by the URL's origin). A task whose origin has none
-- (submitted by a release before 0018) is left unchanged, no row comes back for
-- it, and the caller completes it the older way (transition_task, insert_outbox) in
-- a transaction. RETURNING n.ord: which row of n changed the task.
t AS (
    {{_transition_set}}
       AND (n.event_id IS NULL OR EXISTS (
               SELECT FROM destination_keys WHERE origin = url_origin(tasks.callback_url)))
    RETURNING tasks.*, n.ord
), stored AS (
    INSERT INTO events (event_id, tenant_id, task_id, event_type, body)
    SELECT t.event_id, t.tenant_id, t.id, 'task.' || t.status, {{_event_body}}
      FROM t JOIN n ON n.ord = t.ord WHERE n.event_id IS NOT NULL
), keyed AS (
    -- The terminal events of tasks submitted with an orderingKey (0024), numbered
    -- within their key in the order of n: the statement commits them as one, in it.
    SELECT t.ord, t.tenant_id, k.ordering_key,
           row_number() OVER (PARTITION BY t.tenant_id, k.ordering_key ORDER BY t.ord) AS pos,
           count(*) OVER (PARTITION BY t.tenant_id, k.ordering_key) AS n
      FROM t JOIN n ON n.ord = t.ord JOIN task_ordering_keys k ON k.task_id = t.id
     WHERE n.event_id IS NOT NULL
), {{_place_in_keys}}, queued AS (
    INSERT INTO outbox (event_id, tenant_id, task_id, event_type, callback_url, host,
                        ordering_key, ordering_seq, next_attempt_at, leased_until)
    SELECT t.event_id, t.tenant_id, t.id, 'task.' || t.status, t.callback_url, h.host,
           p.ordering_key, p.seq, CASE WHEN p.parked THEN 'infinity' ELSE now() END,
           CASE WHEN p.parked THEN 'infinity'::timestamptz END
      FROM t JOIN n ON n.ord = t.ord
      JOIN destination_keys h ON h.origin = url_origin(t.callback_url)
      LEFT JOIN placed p ON p.ord = t.ord
     WHERE n.event_id IS NOT NULL
)

-- name: finish_task
-- A task's transition and, when terminal ($5 = its new event id), its event and
-- outbox row, in ONE statement (_finish): in an executor's transaction they commit
-- with its work; the loser of two racing transitions writes nothing.
WITH {{_one_transition}}, {{_finish}}
SELECT {{_task_as_text}} FROM t;

-- name: finish_tasks
-- Transitions of many tasks in ONE statement, as finish_task does one: hookrelay's
-- API coalesces the starts, completes and cancels that arrive together
-- (hookrelay.outbox.tasks.group_commit), under autocommit, so a burst shares one
-- round trip and one commit. $1 is one JSON array, an object per transition, in
-- order (encoded in one call, as insert_tasks's): ord its number in the batch, then
-- as _one_transition's $1 to $7: id, status, result and error (JSON values), event_id,
-- allowed (comma-separated), tenant_id. Nothing else: a parameter whose size the
-- planner can see (the ids again, as an array) made it judge a fresh plan cheaper for
-- each lone complete, and plan every one again (1.3 ms of server CPU, four times the
-- statement's work). The batch never
-- holds two transitions of one task (the coalescer holds the second back for the
-- next statement), so each task changes at most once. A row back for each one that
-- changed its task, by its number; none for a refused one (not found, not allowed,
-- a task without a destination key, or one locked elsewhere), which the caller
-- writes alone.
WITH given AS MATERIALIZED (
    SELECT *
      FROM jsonb_to_recordset($1::text::jsonb)
        AS g(ord int, id text, status text, result jsonb, error jsonb, event_id text,
             allowed text, tenant_id text)
), free_keys AS MATERIALIZED (
    -- The ordering keys (0024) of the batch's terminal transitions that no other
    -- transaction holds, locked for this one. SKIP LOCKED, as for the tasks below.
    SELECT o.tenant_id, o.ordering_key
      FROM ordering_keys o
     WHERE (o.tenant_id, o.ordering_key) IN (
               SELECT k.tenant_id, k.ordering_key
                 FROM task_ordering_keys k
                WHERE k.task_id = ANY(ARRAY(SELECT g.id FROM given g
                                             WHERE g.event_id IS NOT NULL)))
       FOR UPDATE SKIP LOCKED
), n AS MATERIALIZED (
    -- SKIP LOCKED: a task another transaction holds (an executor completing it inside
    -- its own transaction, the sweeper timing it out) is left out rather than waited
    -- for, which would hold up every write of the batch; the caller writes it alone.
    SELECT g.* FROM given g
     WHERE g.id IN (SELECT id FROM tasks
                     WHERE id = ANY(ARRAY(SELECT g2.id FROM given g2))
                       FOR UPDATE SKIP LOCKED)
       -- So is a terminal transition whose task's ordering key another transaction
       -- holds (0024: it is queueing an event of that key, and holds it to commit).
       AND NOT EXISTS (
           SELECT FROM task_ordering_keys k
             JOIN ordering_keys o ON o.tenant_id = k.tenant_id AND o.ordering_key = k.ordering_key
            WHERE k.task_id = g.id AND g.event_id IS NOT NULL
              AND (o.tenant_id, o.ordering_key) NOT IN (SELECT * FROM free_keys))
), {{_finish}}
SELECT t.ord, {{_task_as_text}} FROM t;

-- name: _progress_set
-- A progress call on a running task, from the row n (n.id, n.percent, n.message,
-- n.tenant_id): the report, a new version, and the next heartbeat deadline. Percent
-- never goes backwards (an equal one is a plain heartbeat); no row back means not
-- found, not running, or backwards. Shared by report_progress and report_progresses.
UPDATE tasks
   SET progress = jsonb_build_object(
           'percent', n.percent, 'message', n.message,
           'updatedAt', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
       version = tasks.version + 1,
       updated_at = now(),
       heartbeat_at = now(),
       heartbeat_due_at = CASE WHEN tasks.heartbeat_timeout_s IS NOT NULL
                               THEN now() + make_interval(secs => tasks.heartbeat_timeout_s) END
  FROM n
 WHERE tasks.id = n.id
   -- A value the planner does not know: it reads the rows by key (the line below),
   -- never through tasks_running, which holds every running task and which it
   -- took on a guess of a dozen (4,000 read for one report).
   AND tasks.status = (SELECT 'running'::text)
   AND (n.tenant_id IS NULL OR tasks.tenant_id = n.tenant_id)
   AND COALESCE((tasks.progress ->> 'percent')::float8, 0) <= n.percent
   -- By key, whatever the planner guesses of n (as in _transition_set).
   AND tasks.id = ANY(ARRAY(SELECT n.id FROM n))
RETURNING tasks.*, n.ord

-- name: report_progress
-- One report: $1 the task, $2 percent, $3 message, $4 the tenant (NULL: any).
WITH n AS (SELECT $1::text AS id, $2::float8 AS percent, $3::text AS message,
                  $4::text AS tenant_id, 0 AS ord),
     t AS ({{_progress_set}})
SELECT {{_task_as_text}} FROM t;

-- name: report_progresses
-- Reports on many tasks in ONE statement (the API coalesces those that arrive
-- together, hookrelay.outbox.tasks.group_commit). $1 is one JSON array, an object per
-- report (as finish_tasks's): ord its number in the batch, then as report_progress's
-- $1 to $4: id, percent, message, tenant_id; nothing else, for the reason
-- finish_tasks gives (its plan is kept, not made again for each lone report).
-- Never two reports on one task in a batch. A row back for each one written, by its
-- number; none for one refused or locked elsewhere, which the caller reports alone.
WITH given AS MATERIALIZED (
    SELECT *
      FROM jsonb_to_recordset($1::text::jsonb)
        AS g(ord int, id text, percent float8, message text, tenant_id text)
), n AS MATERIALIZED (
    -- SKIP LOCKED, as in finish_tasks: a task locked elsewhere is reported alone.
    SELECT g.* FROM given g
     WHERE g.id IN (SELECT id FROM tasks
                     WHERE id = ANY(ARRAY(SELECT g2.id FROM given g2))
                       FOR UPDATE SKIP LOCKED)
), t AS ({{_progress_set}})
SELECT t.ord, {{_task_as_text}} FROM t;

-- name: notify_task
-- Wakes the watchers of one task at commit (and no dispatcher: nothing to send).
SELECT pg_notify($2, $1);

-- name: insert_outbox
-- The event itself, stored once and never changed, and its outbox row: the
-- lean row the dispatchers claim, which carries no body.
WITH stored AS (
    INSERT INTO events (event_id, tenant_id, task_id, event_type, body)
    VALUES ($1, $2, $3, $4, $7)
)
INSERT INTO outbox (event_id, tenant_id, task_id, event_type, callback_url, host)
VALUES ($1, $2, $3, $4, $5, $6);

-- name: event_body
-- The body stored when the event was committed; NULL for an event stored
-- before bodies were kept beyond delivery.
SELECT body FROM events WHERE event_id = $1;

-- name: notify
-- Delivered at commit, so a dispatcher never wakes for an uncommitted row.
-- $2 and $3: the outbox and task channels (named once, in hookrelay.outbox.store).
SELECT pg_notify($2, ''), pg_notify($3, $1);

-- name: idempotency_lock
-- Non-blocking: a second request with the same key while the first is still in
-- its transaction gets "in flight" (409) rather than queueing behind it.
SELECT pg_try_advisory_xact_lock(hashtextextended($1 || ':' || $2, 42));

-- name: idempotency_get
-- The key's request hash and its task, in one read (the key's row goes with its
-- task, ON DELETE CASCADE, so the task is there).
SELECT k.request_hash, t.*, (SELECT h.names FROM callback_headers h WHERE h.task_id = t.id) AS callback_header_names,
       (SELECT k.ordering_key FROM task_ordering_keys k WHERE k.task_id = t.id) AS ordering_key
  FROM idempotency_keys k JOIN tasks t ON t.id = k.task_id
 WHERE k.tenant_id = $1 AND k.key = $2;

-- name: due_lanes
-- Scheduler, step 1: the lanes (host, tenant) that have due rows, each with its
-- oldest due time, how many rows are due (counted no further than $1, the most
-- one claim could give a lane) and its host's circuit state.
-- A skip scan over outbox_lane_due: the recursive part jumps from lane to lane
-- (one index probe each), the lateral part reads a lane's first rows only. The
-- cost grows with the number of lanes, never with the rows waiting in them:
-- rows scheduled later and rows held behind an open circuit sort after now()
-- within their lane and are never read. Leased rows are read and skipped (the
-- index leaves the lease out so that a claim's UPDATE is HOT, 0011): at most
-- what the dispatchers have in flight or waiting ahead on the lane.
WITH RECURSIVE lanes AS (
    (SELECT host, tenant_id FROM outbox ORDER BY host, tenant_id LIMIT 1)
    UNION ALL
    SELECT n.host, n.tenant_id
      FROM lanes l
     CROSS JOIN LATERAL (
        SELECT o.host, o.tenant_id
          FROM outbox o
         WHERE (o.host, o.tenant_id) > (l.host, l.tenant_id)
         ORDER BY o.host, o.tenant_id
         LIMIT 1) n
)
SELECT l.host, l.tenant_id, d.oldest, d.n, COALESCE(dest.state, 'closed') AS state
  FROM lanes l
 CROSS JOIN LATERAL (
    SELECT min(x.due) AS oldest, count(*)::int AS n
      FROM (SELECT o.next_attempt_at AS due
              FROM outbox o
             WHERE o.host = l.host AND o.tenant_id = l.tenant_id
               AND o.next_attempt_at <= now()
               AND (o.leased_until IS NULL OR o.leased_until <= now())
             ORDER BY o.next_attempt_at
             LIMIT $1) x) d
  LEFT JOIN destinations dest ON dest.host = l.host
 WHERE d.n > 0;

-- name: claim_lanes
-- Scheduler, step 2: lease, in each lane ($1 hosts, $2 tenants, $3 counts), at
-- most its count of due rows, oldest first, for $4 seconds under token $6,
-- owner $5. The counts are the lanes' free slots (outbox/dispatch/scheduler.py), plus for
-- a busy lane alone on its host a few rows to start as its slots free
-- (outbox/dispatch/claim_ahead.py): nothing is leased to be given back.
-- FOR UPDATE SKIP LOCKED (inside each lane's window): concurrent dispatchers
-- each take disjoint rows at once instead of queueing on each other's row
-- locks; the lease, not the row lock, holds the claim after this short
-- transaction commits, so no transaction stays open across the HTTP calls.
-- A host whose circuit opened since the lanes were read is skipped: its rows
-- are held, budget unspent. The ids go to the UPDATE as an array, so it probes
-- the primary key for each (the planner cannot size the lanes' windows and
-- would otherwise hash-join against a scan of the whole outbox).
WITH want AS (
    SELECT w.host, w.tenant_id, w.n
      FROM unnest($1::text[], $2::text[], $3::int[]) AS w(host, tenant_id, n)
     WHERE NOT EXISTS (SELECT 1 FROM destinations d WHERE d.host = w.host AND d.state <> 'closed')
),
due AS (
    SELECT r.id
      FROM want w
     CROSS JOIN LATERAL (
        SELECT o.id
          FROM outbox o
         WHERE o.host = w.host AND o.tenant_id = w.tenant_id
           AND o.next_attempt_at <= now()
           AND (o.leased_until IS NULL OR o.leased_until <= now())
         ORDER BY o.next_attempt_at
         LIMIT w.n
           FOR UPDATE SKIP LOCKED) r
)
-- A row still under a token was never given back: its lease ran out with no
-- outcome written (a crash, or a write that failed), counted in lost_leases.
UPDATE outbox o
   SET leased_until = now() + make_interval(secs => $4),
       lease_token = $6,
       lease_owner = $5,
       lost_leases = o.lost_leases + (o.lease_token IS NOT NULL)::int
 WHERE o.id = ANY (ARRAY(SELECT id FROM due))
RETURNING o.id, o.event_id, o.tenant_id, o.task_id, o.event_type, o.callback_url, o.host,
          -- The body is joined from events: the outbox row stays lean.
          -- As UTF-8 bytes: what is sent, with no text decoding and encoding per row.
          (SELECT convert_to(e.body, 'UTF8') FROM events e WHERE e.event_id = o.event_id),
          o.attempts,
          o.budget_used,
          -- Read with the claim: a rotation committed before it is seen here.
          (SELECT t.secret_version FROM tenants t WHERE t.id = o.tenant_id),
          o.lost_leases,
          -- The task's callback headers, sealed (NULL for none, and for a test event).
          (SELECT h.sealed FROM callback_headers h WHERE h.task_id = o.task_id),
          -- The task's trace context (0022), sent on with the attempt: NULL for a
          -- test event, or a task submitted without one.
          (SELECT ARRAY[tt.traceparent, tt.tracestate] FROM task_traces tt
            WHERE tt.task_id = o.task_id),
          -- Its orderingKey (0024): its outcome, delivered or dead, hands the key on.
          o.ordering_key;

-- name: claim_probe
-- The single row a granted probe sends to host $1 (take_probes made its circuit
-- half-open for this dispatcher alone): any row not leased right now, whether
-- due or held (but not parked behind its ordering key), in index order so the read
-- stops at the first one.
-- FOR UPDATE SKIP LOCKED: a row another dispatcher is claiming is passed over.
WITH probe AS (
    SELECT o.id
      FROM outbox o
     WHERE o.host = $1 AND (o.leased_until IS NULL OR o.leased_until <= now())
       -- never one waiting behind an earlier event of its ordering key (0024)
       AND o.next_attempt_at <> 'infinity'
     ORDER BY o.host, o.tenant_id, o.next_attempt_at
     LIMIT 1
       FOR UPDATE SKIP LOCKED
)
UPDATE outbox o
   SET leased_until = now() + make_interval(secs => $2),
       lease_token = $4,
       lease_owner = $3,
       -- As in claim_lanes: a lease that ran out with no outcome written.
       lost_leases = o.lost_leases + (o.lease_token IS NOT NULL)::int
  FROM probe
 WHERE o.id = probe.id
RETURNING o.id, o.event_id, o.tenant_id, o.task_id, o.event_type, o.callback_url, o.host,
          -- As UTF-8 bytes: what is sent, with no text decoding and encoding per row.
          (SELECT convert_to(e.body, 'UTF8') FROM events e WHERE e.event_id = o.event_id),
          o.attempts,
          o.budget_used,
          -- Read with the claim: a rotation committed before it is seen here.
          (SELECT t.secret_version FROM tenants t WHERE t.id = o.tenant_id),
          o.lost_leases,
          -- The task's callback headers, sealed (NULL for none, and for a test event).
          (SELECT h.sealed FROM callback_headers h WHERE h.task_id = o.task_id),
          -- The task's trace context (0022), sent on with the attempt: NULL for a
          -- test event, or a task submitted without one.
          (SELECT ARRAY[tt.traceparent, tt.tracestate] FROM task_traces tt
            WHERE tt.task_id = o.task_id),
          -- Its orderingKey (0024): its outcome, delivered or dead, hands the key on.
          o.ordering_key;

-- name: take_host_tokens
-- HOOKRELAY_PER_HOST_RATE, shared by every dispatcher of the database: for each
-- host of $1, take at most $2 (the rows this claim wants to send there) from its
-- token bucket, refilled at $3 tokens a second up to $4, the bucket's size, since
-- it was last taken from; returns each host's grant. A host seen for the first
-- time starts with a full bucket. One statement: the wanted count (capped by the
-- bucket's size) travels as the row the INSERT proposes, `granted`, which the
-- conflict's UPDATE reads back as excluded.granted. The rows are locked for the
-- statement only, in host order (no deadlock between dispatchers); the UPDATE's
-- expressions see the row as it was. Time never runs backwards for a bucket: a
-- statement that started before the last take (it waited for the row's lock)
-- refills nothing and leaves refilled_at where it was, so no second is counted
-- twice. Tokens granted and not claimed go back (return_host_tokens).
INSERT INTO host_rates AS r (host, tokens, granted, refilled_at)
SELECT w.host, $4::float8 - least(w.n, floor($4::float8)::int), least(w.n, floor($4::float8)::int),
       statement_timestamp()
  FROM unnest($1::text[], $2::int[]) AS w(host, n)
 ORDER BY w.host
    ON CONFLICT (host) DO UPDATE
   SET granted = least(excluded.granted, floor(least($4::float8, r.tokens + $3::float8
                 * greatest(0, extract(epoch FROM statement_timestamp() - r.refilled_at))))::int),
       tokens = least($4::float8, r.tokens + $3::float8
                * greatest(0, extract(epoch FROM statement_timestamp() - r.refilled_at)))
                - least(excluded.granted, floor(least($4::float8, r.tokens + $3::float8
                * greatest(0, extract(epoch FROM statement_timestamp() - r.refilled_at))))::int),
       refilled_at = greatest(r.refilled_at, statement_timestamp())
RETURNING host, granted;

-- name: return_host_tokens
-- Tokens take_host_tokens granted that the claim did not use (fewer rows due
-- than counted, or taken by another dispatcher): back into the buckets of hosts
-- $1, $2 each, never beyond the bucket's size $3.
UPDATE host_rates r
   SET tokens = least($3::float8, r.tokens + v.n)
  FROM unnest($1::text[], $2::int[]) AS v(host, n)
 WHERE r.host = v.host;

-- name: hold_lanes
-- Take the due rows of hosts $1 out of the claims' way while their circuit is
-- not closed: they move to the host's held_until (set once per open spell, $2
-- seconds ahead), after every due row, so neither due_lanes nor claim_lanes
-- reads them again. record_outcomes puts them back when the host answers; if
-- that never comes, they are due again at held_until and held once more.
-- FOR UPDATE SKIP LOCKED: a row another dispatcher is leasing right now is
-- left to it rather than waited for.
-- The tenants whose task webhooks this holds are noted once per open episode
-- (destination_notices, 0021): the first note of a (host, tenant) queues its
-- destination.unhealthy notification (trigger), the circuit's closing its
-- destination.recovered; a notification's own row held here notes nothing.
WITH hosts AS (
    UPDATE destinations d
       SET held_until = CASE WHEN d.held_until > now() THEN d.held_until
                             ELSE now() + make_interval(secs => $2) END
     WHERE d.host = ANY($1::text[]) AND d.state <> 'closed'
    RETURNING d.host, d.held_until
),
rows AS (
    SELECT o.id, h.held_until, o.host, o.tenant_id, o.task_id
      FROM hosts h
      JOIN outbox o ON o.host = h.host
     WHERE GREATEST(o.next_attempt_at, o.leased_until) <= now()
       FOR UPDATE OF o SKIP LOCKED
),
noted AS (
    INSERT INTO destination_notices (host, tenant_id)
    SELECT DISTINCT r.host, r.tenant_id FROM rows r WHERE r.task_id IS NOT NULL
    ON CONFLICT DO NOTHING
)
UPDATE outbox o
   SET next_attempt_at = r.held_until, leased_until = NULL, lease_token = NULL,
       lease_owner = NULL
  FROM rows r
 WHERE o.id = r.id;

-- name: take_probes
-- Hosts whose open circuit is due a probe. The row lock of this UPDATE gives
-- the probe right to exactly one dispatcher, and pushing probe_at forward keeps
-- the others (and this one's next round) from probing again before the outcome.
UPDATE destinations
   SET state = 'half-open', probe_at = now() + make_interval(secs => $1), updated_at = now()
 WHERE state <> 'closed' AND probe_at <= now()
RETURNING host;

-- name: list_destinations
SELECT d.host, d.state, d.consecutive_failures, d.last_error, d.last_failure_at, d.opened_at,
       d.probe_at,
       (SELECT count(*) FROM outbox o WHERE o.host = d.host) AS held
  FROM destinations d
 ORDER BY d.state <> 'closed' DESC, d.consecutive_failures DESC, d.host
 LIMIT $1;

-- name: release_leases
-- Give rows back untouched (shutdown, or more rows for a host than it may take).
-- Fenced on the token: rows another dispatcher took over are left alone.
UPDATE outbox
   SET leased_until = NULL, lease_token = NULL, lease_owner = NULL
 WHERE id = ANY($1::bigint[]) AND lease_token = $2;

-- name: _hand_on_keys
-- Ordered delivery (0024): the events of the CTE `gone` (tenant_id, ordering_key) left
-- the outbox in this statement, delivered or dead; each keyed one hands its key on.
-- Its key counts one fewer event waiting, and the next in the key's queue (parked
-- behind it) is due now. The caller took the keys' rows first (lock_ordering_keys, in
-- the same transaction, before this statement's snapshot): every event of the key
-- committed before is seen here, and a writer of the key that commits after sees
-- this one gone from pending. Rows of `input` are left to the statement's other CTEs,
-- as a row may be changed only once per statement (and those are leaving).
left_keys AS (
    SELECT g.tenant_id, g.ordering_key, count(*)::int AS n
      FROM gone g
     WHERE g.ordering_key IS NOT NULL
     GROUP BY g.tenant_id, g.ordering_key
),
handed AS (
    UPDATE ordering_keys k
       SET pending = greatest(k.pending - l.n, 0)
      FROM left_keys l
     WHERE k.tenant_id = l.tenant_id AND k.ordering_key = l.ordering_key
),
next_up AS (
    UPDATE outbox o
       SET next_attempt_at = now(), leased_until = NULL
     WHERE o.id IN (SELECT (SELECT p.id FROM outbox p
                             WHERE p.tenant_id = l.tenant_id AND p.ordering_key = l.ordering_key
                               AND p.id NOT IN (SELECT id FROM input)
                             ORDER BY p.ordering_seq
                             LIMIT 1)
                      FROM left_keys l)
       AND o.next_attempt_at = 'infinity'
)

-- name: record_outcomes
-- One statement, one round trip, for a whole batch of attempt outcomes.
-- Every write is fenced on (id, lease_token): a dispatcher whose lease ran out
-- and whose row another dispatcher now holds matches nothing, so its stale
-- outcome is dropped, not written over the new owner's work. Only rows that pass
-- the fence get an attempt logged and the task summary updated.
WITH input AS (
    SELECT *
      FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::timestamptz[], $5::int[],
                  $6::text[], $7::timestamptz[], $8::float8[], $9::text[])
        AS i(id, token, outcome, next_at, status_code, error, attempted_at, duration_ms,
             response_prefix)
),
delivered AS (
    DELETE FROM outbox o USING input i
     WHERE o.id = i.id AND o.lease_token = i.token AND i.outcome = 'delivered'
    RETURNING o.id, o.event_id, o.task_id, o.tenant_id, o.host, o.attempts + 1 AS number,
              o.ordering_key
),
retried AS (
    UPDATE outbox o
       SET attempts = o.attempts + 1,
           budget_used = o.budget_used + 1,
           next_attempt_at = i.next_at,
           leased_until = NULL, lease_token = NULL, lease_owner = NULL,
           last_error = i.error, last_status_code = i.status_code,
           lost_leases = 0
      FROM input i
     WHERE o.id = i.id AND o.lease_token = i.token AND i.outcome = 'retry'
    RETURNING o.id, o.event_id, o.task_id, o.tenant_id, o.host, o.attempts AS number
),
dead AS (
    DELETE FROM outbox o USING input i
     WHERE o.id = i.id AND o.lease_token = i.token AND i.outcome = 'dead'
    RETURNING o.*
),
buried AS (
    INSERT INTO dead_letters AS d (event_id, tenant_id, task_id, event_type, callback_url, host,
                                   body, created_at, attempts, last_error, last_status_code,
                                   ordering_key)
    SELECT x.event_id, x.tenant_id, x.task_id, x.event_type, x.callback_url, x.host, e.body,
           x.created_at, x.attempts + 1, i.error, i.status_code, x.ordering_key
      FROM dead x JOIN input i ON i.id = x.id JOIN events e ON e.event_id = x.event_id
    ON CONFLICT (event_id) DO UPDATE
       SET failed_at = now(), attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
           last_status_code = EXCLUDED.last_status_code, callback_url = EXCLUDED.callback_url,
           host = EXCLUDED.host, ordering_key = EXCLUDED.ordering_key,
           replayed_at = NULL, replayed_by = NULL
),
gone AS (
    SELECT tenant_id, ordering_key FROM delivered
    UNION ALL SELECT tenant_id, ordering_key FROM dead
), {{_hand_on_keys}},
fenced AS (
    SELECT id, event_id, task_id, tenant_id, host, number FROM delivered
    UNION ALL SELECT id, event_id, task_id, tenant_id, host, number FROM retried
    UNION ALL SELECT id, event_id, task_id, tenant_id, host, attempts + 1 FROM dead
),
-- Destination health: any answer in the batch (2xx, or 410) closes the host's
-- circuit; a batch of only failures adds to the run and opens the circuit at
-- $10 in a row (next probe after $11 s). Healthy hosts that stay healthy are
-- never written. Inserted consecutive_failures = 0 means "the host answered".
per_host AS (
    SELECT f.host,
           CASE WHEN bool_or(i.outcome = 'delivered' OR i.status_code = 410) THEN 0
                ELSE count(*) END AS failures,
           (array_agg(i.error ORDER BY i.attempted_at DESC))[1] AS last_error
      FROM fenced f JOIN input i ON i.id = f.id
     GROUP BY f.host
),
-- Hosts that answered while their rows were held (hold_lanes): those rows are
-- due again at once. Read before health's upsert clears held_until (every CTE
-- sees the same snapshot); rows of this batch are left to the CTEs above, as a
-- row may be changed only once per statement.
reopened AS (
    SELECT d.host, d.held_until
      FROM destinations d JOIN per_host p ON p.host = d.host
     WHERE p.failures = 0 AND d.held_until IS NOT NULL
),
released AS (
    UPDATE outbox o
       SET next_attempt_at = now()
      FROM reopened r
     WHERE o.host = r.host AND o.next_attempt_at = r.held_until
       AND o.id NOT IN (SELECT id FROM input)
),
health AS (
    INSERT INTO destinations AS d (host, state, consecutive_failures, last_error,
                                   last_failure_at, opened_at, probe_at)
    SELECT host, CASE WHEN failures >= $10 THEN 'open' ELSE 'closed' END, failures, last_error,
           now(), CASE WHEN failures >= $10 THEN now() END,
           CASE WHEN failures >= $10 THEN now() + make_interval(secs => $11) END
      FROM per_host p
     WHERE p.failures > 0 OR EXISTS (SELECT 1 FROM destinations x WHERE x.host = p.host)
    ON CONFLICT (host) DO UPDATE
       SET consecutive_failures = CASE WHEN EXCLUDED.consecutive_failures = 0 THEN 0
                                  ELSE d.consecutive_failures + EXCLUDED.consecutive_failures END,
           state = CASE WHEN EXCLUDED.consecutive_failures = 0 THEN 'closed'
                        WHEN d.state = 'half-open' OR d.consecutive_failures
                             + EXCLUDED.consecutive_failures >= $10 THEN 'open'
                        ELSE d.state END,
           opened_at = CASE WHEN EXCLUDED.consecutive_failures = 0 THEN NULL
                            WHEN d.state = 'closed' THEN now()
                            ELSE d.opened_at END,
           probe_at = CASE WHEN EXCLUDED.consecutive_failures = 0 THEN NULL
                           ELSE now() + make_interval(secs => $11) END,
           last_error = COALESCE(EXCLUDED.last_error, d.last_error),
           last_failure_at = CASE WHEN EXCLUDED.consecutive_failures = 0 THEN d.last_failure_at
                                  ELSE now() END,
           held_until = CASE WHEN EXCLUDED.consecutive_failures = 0 THEN NULL
                             ELSE d.held_until END,
           updated_at = now()
),
logged AS (
    INSERT INTO delivery_attempts (event_id, task_id, tenant_id, number, attempted_at,
                                   duration_ms, outcome, status_code, error, response_prefix)
    SELECT f.event_id, f.task_id, f.tenant_id, f.number, i.attempted_at, i.duration_ms,
           i.outcome, i.status_code, i.error, i.response_prefix
      FROM fenced f JOIN input i ON i.id = f.id
),
summary AS (
    UPDATE tasks t
       SET delivery_status = CASE i.outcome WHEN 'delivered' THEN 'delivered'
                                            WHEN 'dead' THEN 'dead' ELSE 'pending' END,
           delivery_attempts = f.number,
           last_attempt_at = i.attempted_at,
           last_status_code = i.status_code,
           last_error = i.error,
           next_attempt_at = CASE WHEN i.outcome = 'retry' THEN i.next_at END,
           delivered_at = CASE WHEN i.outcome = 'delivered' THEN i.attempted_at
                               ELSE t.delivered_at END,
           updated_at = now()
      FROM fenced f JOIN input i ON i.id = f.id
     WHERE t.id = f.task_id AND t.event_id = f.event_id
)
SELECT f.id FROM fenced f;

-- name: lock_ordering_keys
-- Ordered delivery (0024): the rows of keys ($1 tenants, $2 keys) whose events an
-- outcome write is about to take out of the outbox, locked until the caller's
-- transaction ends, before the write takes its snapshot (_hand_on_keys says why).
-- SKIP LOCKED: a key another transaction holds (an executor queueing an event of it
-- in a transaction still open) is not waited for, which would hold up the outcomes
-- of every tenant behind it; the caller writes that key's outcome in a later batch.
-- Returns the keys taken.
SELECT tenant_id, ordering_key
  FROM ordering_keys
 WHERE (tenant_id, ordering_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))
   FOR UPDATE SKIP LOCKED;

-- name: lock_stuck_keys
-- The dispatchers' sweep of ordering keys (0024), step 1: up to $1 keys with events
-- waiting and none of them due or in flight. An event that left the outbox without
-- handing its key on (taken out by a process of an earlier release, or by hand)
-- leaves its followers parked; so does a pending count left too high by a replay
-- racing another. FOR UPDATE SKIP LOCKED: a key being written or handed on right
-- now is passed over, and the lock keeps it still for step 2.
SELECT k.tenant_id, k.ordering_key
  FROM ordering_keys k
 WHERE k.pending > 0
   AND NOT EXISTS (SELECT 1 FROM outbox o
                    WHERE o.tenant_id = k.tenant_id AND o.ordering_key = k.ordering_key
                      AND o.next_attempt_at <> 'infinity')
 LIMIT $1
   FOR UPDATE SKIP LOCKED;

-- name: release_stuck_keys
-- The sweep, step 2, in the same transaction and a snapshot taken after step 1's
-- locks, so it sees every event of keys ($1 tenants, $2 keys) committed: of the keys
-- still stuck, the pending count is set to the events waiting and the first of them
-- is made due. Returns the events made due.
WITH k AS (
    SELECT * FROM unnest($1::text[], $2::text[]) AS k(tenant_id, ordering_key)
),
stuck AS (
    SELECT k.tenant_id, k.ordering_key
      FROM k
     WHERE NOT EXISTS (SELECT 1 FROM outbox o
                        WHERE o.tenant_id = k.tenant_id AND o.ordering_key = k.ordering_key
                          AND o.next_attempt_at <> 'infinity')
),
recounted AS (
    UPDATE ordering_keys x
       SET pending = (SELECT count(*) FROM outbox o
                       WHERE o.tenant_id = x.tenant_id AND o.ordering_key = x.ordering_key)
      FROM stuck s
     WHERE x.tenant_id = s.tenant_id AND x.ordering_key = s.ordering_key
)
UPDATE outbox o
   SET next_attempt_at = now(), leased_until = NULL
 WHERE o.id IN (SELECT (SELECT p.id FROM outbox p
                         WHERE p.tenant_id = s.tenant_id AND p.ordering_key = s.ordering_key
                         ORDER BY p.ordering_seq
                         LIMIT 1)
                  FROM stuck s)
RETURNING o.event_id;

-- name: ping
-- Readiness: the cheapest statement that proves a working connection, and whether
-- the server takes writes (false on a standby, or with default_transaction_read_only).
SELECT current_setting('transaction_read_only') = 'off';

-- name: oldest_transaction
-- Age of the oldest transaction open against this database, ours or anyone's.
-- While one stays open, no dead outbox row can be vacuumed and every claim steps
-- over more of them (RELIABILITY.md measures it); alert on this long before.
SELECT COALESCE(extract(epoch FROM now() - {{_oldest_xact_start}}), 0)::float8;

-- name: outbox_stats
-- Depth, and how overdue the oldest due row is (0 when nothing is due).
SELECT count(*) AS depth,
       COALESCE(EXTRACT(EPOCH FROM now() - min(GREATEST(next_attempt_at, leased_until))
                FILTER (WHERE GREATEST(next_attempt_at, leased_until) <= now())), 0)::float8
           AS oldest_due_s
  FROM outbox;

-- name: dead_letters_by_tenant
SELECT tenant_id, count(*) AS n FROM dead_letters WHERE replayed_at IS NULL GROUP BY tenant_id;

-- name: tasks_by_status
SELECT status, count(*) AS n FROM tasks GROUP BY status;

-- name: claim_overdue_tasks
-- Live tasks ($2: the non-terminal statuses) past their deadline. FOR UPDATE SKIP LOCKED lets every process's
-- sweeper run at once without doing the same task twice, and skips a task an
-- executor is completing right now: if that commits, the task is terminal and
-- never selected; if it rolls back, the next sweep takes it.
SELECT id FROM tasks
 WHERE timeout_at <= now() AND status = ANY($2::text[])
 ORDER BY timeout_at
 LIMIT $1
   FOR UPDATE SKIP LOCKED;

-- name: claim_silent_tasks
-- Running tasks whose executor has not started or reported for its heartbeat
-- budget (served by tasks_heartbeat_due). FOR UPDATE SKIP LOCKED for the same
-- reasons as claim_overdue_tasks.
SELECT id FROM tasks
 WHERE heartbeat_due_at <= now() AND status = 'running'
 ORDER BY heartbeat_due_at
 LIMIT $1
   FOR UPDATE SKIP LOCKED;

-- name: stale_running_tasks
-- Running tasks with no start or progress for $1 seconds, and the age of the
-- oldest sign of life among running tasks (tasks_running).
SELECT count(*) FILTER (WHERE heartbeat_at < now() - make_interval(secs => $1)) AS stale,
       COALESCE(EXTRACT(EPOCH FROM now() - min(heartbeat_at)), 0)::float8 AS oldest_s
  FROM tasks
 WHERE status = 'running';

-- name: lock_task
SELECT t.*, (SELECT h.names FROM callback_headers h WHERE h.task_id = t.id) AS callback_header_names,
       (SELECT k.ordering_key FROM task_ordering_keys k WHERE k.task_id = t.id) AS ordering_key
  FROM tasks t WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2) FOR UPDATE OF t;

-- name: requeue_events
-- Put events back into the outbox, one row per element of the arrays $1..$7,
-- under their own event ids and with a fresh attempt budget (budget_used 0);
-- attempts carries on from the log so attempt numbers stay unique per event.
-- ON CONFLICT: an event still waiting is not queued twice, and not returned.
-- The body goes to events only if the event has none stored there: a stored
-- body is never replaced, so every sending of an event carries the same bytes.
-- For the events queued, their open dead letters are closed as replayed by $8
-- and their tasks' delivery summaries go back to pending. Shared by redelivery
-- and dead-letter replay, so both put an event back the same way.
WITH input AS (
    SELECT i.*, row_number() OVER () AS ord
      FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                  $7::text[])
        AS i(event_id, tenant_id, task_id, event_type, callback_url, host, body)
),
keyed AS (
    -- Ordered delivery (0024): the event of a task with an orderingKey goes to the end
    -- of its key's queue, as if committed now, behind the key's events waiting. An
    -- event still waiting is left out, as ON CONFLICT below leaves it.
    SELECT i.ord, i.tenant_id, k.ordering_key,
           row_number() OVER (PARTITION BY i.tenant_id, k.ordering_key ORDER BY i.ord) AS pos,
           count(*) OVER (PARTITION BY i.tenant_id, k.ordering_key) AS n
      FROM input i JOIN task_ordering_keys k ON k.task_id = i.task_id
     WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = i.event_id)
), {{_place_in_keys}},
stored AS (
    INSERT INTO events (event_id, tenant_id, task_id, event_type, body)
    SELECT i.event_id, i.tenant_id, i.task_id, i.event_type, i.body FROM input i
    ON CONFLICT (event_id) DO NOTHING
),
queued AS (
    INSERT INTO outbox (event_id, tenant_id, task_id, event_type, callback_url, host, attempts,
                        ordering_key, ordering_seq, next_attempt_at, leased_until)
    SELECT i.event_id, i.tenant_id, i.task_id, i.event_type, i.callback_url, i.host,
           COALESCE((SELECT max(a.number) FROM delivery_attempts a
                      WHERE a.event_id = i.event_id), 0),
           p.ordering_key, p.seq, CASE WHEN p.parked THEN 'infinity' ELSE now() END,
           CASE WHEN p.parked THEN 'infinity'::timestamptz END
      FROM input i LEFT JOIN placed p ON p.ord = i.ord
    ON CONFLICT (event_id) DO NOTHING
    RETURNING event_id, task_id
),
marked AS (
    UPDATE dead_letters d
       SET replayed_at = now(), replayed_by = $8, replay_count = d.replay_count + 1
      FROM queued q WHERE d.event_id = q.event_id AND d.replayed_at IS NULL
),
summary AS (
    UPDATE tasks t
       SET delivery_status = 'pending', next_attempt_at = now(), updated_at = now()
      FROM queued q WHERE t.id = q.task_id AND t.event_id = q.event_id
)
SELECT event_id FROM queued;

-- name: attempts
-- A task's delivery log, oldest first; $2 narrows it to one of its events
-- (a task's events share its log; delivery_attempts_task serves both).
SELECT event_id, number, attempted_at, duration_ms, outcome, status_code, error, response_prefix
  FROM delivery_attempts
 WHERE task_id = $1 AND ($2::text IS NULL OR event_id = $2)
 ORDER BY number;

-- name: _error_class
-- How an operator sorts a failure (hookrelay.outbox.models.ErrorClass), from the stored
-- status code and error text; the texts are those hookrelay.outbox.dispatch.attempt writes.
(CASE
   WHEN last_status_code BETWEEN 400 AND 499 THEN 'http_4xx'
   WHEN last_status_code BETWEEN 500 AND 599 THEN 'http_5xx'
   WHEN last_error LIKE 'destination refused:%' OR last_error LIKE 'invalid callback URL:%'
     THEN 'blocked'
   WHEN last_error ILIKE '%timed out%' OR last_error ILIKE '%timeout%' THEN 'timeout'
   WHEN last_error ILIKE '%DNS%' OR last_error ILIKE '%resolv%' OR last_error ILIKE '%getaddrinfo%'
     OR last_error ILIKE '%name or service not known%' THEN 'dns'
   WHEN last_error ILIKE '%SSL%' OR last_error ILIKE '%TLS%' OR last_error ILIKE '%certificate%'
     THEN 'tls'
   WHEN last_error ILIKE '%connect%' OR last_error ILIKE '%disconnect%'
     OR last_error ILIKE '%reset%' OR last_error ILIKE '%refused%' THEN 'connect'
   ELSE 'other'
 END)

-- name: event_attempts
-- One event's attempts, oldest first, whatever task it belongs to (a test event
-- has none); (event_id, number) is unique, so its index serves this. $2 NULL
-- means any tenant (ops); partners pass theirs.
SELECT event_id, number, attempted_at, duration_ms, outcome, status_code, error, response_prefix
  FROM delivery_attempts
 WHERE event_id = $1 AND ($2::text IS NULL OR tenant_id = $2)
 ORDER BY number;

-- name: test_event_state
-- Where a tenant's test event ($1, tenant $2) is: waiting in the outbox, given
-- up on (an open dead letter), or delivered (per its log); NULL when the tenant
-- has no test event by that id. task_id IS NULL keeps tasks' events out.
SELECT CASE WHEN EXISTS (SELECT 1 FROM outbox
                          WHERE event_id = $1 AND tenant_id = $2 AND task_id IS NULL)
            THEN 'pending'
            WHEN EXISTS (SELECT 1 FROM dead_letters
                          WHERE event_id = $1 AND tenant_id = $2 AND task_id IS NULL
                            AND replayed_at IS NULL)
            THEN 'dead'
            WHEN EXISTS (SELECT 1 FROM delivery_attempts
                          WHERE event_id = $1 AND tenant_id = $2 AND task_id IS NULL
                            AND outcome = 'delivered')
            THEN 'delivered' END;

-- name: _dead_filter
-- Shared filter of the dead-letter queries: $1 tenant, $2 since, $3 until,
-- $4 event type, $5 event id, $6 last status code, $7 error class (each NULL =
-- any). Only letters not yet replayed.
replayed_at IS NULL
   AND ($1::text IS NULL OR tenant_id = $1)
   AND ($2::timestamptz IS NULL OR failed_at >= $2)
   AND ($3::timestamptz IS NULL OR failed_at < $3)
   AND ($4::text IS NULL OR event_type = $4)
   AND ($5::text IS NULL OR event_id = $5)
   AND ($6::integer IS NULL OR last_status_code = $6)
   AND ($7::text IS NULL OR {{_error_class}} = $7)

-- name: list_dead_letters
-- Keyset on (failed_at, event_id) after the cursor ($8, $9); $10 = page size.
SELECT event_id, tenant_id, task_id, event_type, callback_url, created_at, failed_at, attempts,
       last_error, last_status_code, replay_count, replayed_at, replayed_by, {{_error_class}},
       ordering_key
  FROM dead_letters
 WHERE {{_dead_filter}}
   AND ($8::timestamptz IS NULL OR (failed_at, event_id) > ($8, $9::text))
 ORDER BY failed_at, event_id
 LIMIT $10;

-- name: get_dead_letter
SELECT event_id, tenant_id, task_id, event_type, callback_url, created_at, failed_at, attempts,
       last_error, last_status_code, replay_count, replayed_at, replayed_by, {{_error_class}},
       ordering_key
  FROM dead_letters
 WHERE event_id = $1;

-- name: pick_dead_letters
-- Up to $8 matching letters to replay, row-locked for the caller's transaction.
-- FOR UPDATE SKIP LOCKED: two replays racing over the same letters split them
-- instead of both requeueing; the outbox's unique event_id is the backstop.
SELECT event_id, tenant_id, task_id, event_type, callback_url, host, body
  FROM dead_letters
 WHERE {{_dead_filter}}
 ORDER BY failed_at, event_id
 LIMIT $8
   FOR UPDATE SKIP LOCKED;

-- name: dead_letter_clock
-- The database's clock now (not the transaction's start): a bulk replay takes
-- it once and replays only letters that failed before it, so letters that die
-- again while it runs (failed_at = now() of a later transaction) are left alone.
SELECT clock_timestamp();

-- name: purge_attempts
-- Small batches ($2 rows) so no delete holds locks or bloats WAL for long.
-- Only the log of events that are finished: nothing still in the outbox, and
-- nothing an operator may still want to replay.
-- FOR UPDATE SKIP LOCKED: every dispatcher runs a sweeper and every sweeper
-- purges, so purges overlap; each batch takes rows no other purge holds rather
-- than queueing on its row locks (only to find them gone when it commits).
WITH doomed AS (
    SELECT a.id FROM delivery_attempts a
     WHERE a.attempted_at < $1
       AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = a.event_id)
       AND NOT EXISTS (SELECT 1 FROM dead_letters d
                        WHERE d.event_id = a.event_id AND d.replayed_at IS NULL)
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
DELETE FROM delivery_attempts a USING doomed d WHERE a.id = d.id;

-- name: purge_tasks
-- Finished tasks ($3: the terminal statuses) whose event is no longer waiting; idempotency keys go with
-- them (ON DELETE CASCADE, found by idempotency_keys_task), and so does their stored
-- event (a task has one). $2 at a time. A task whose event is an open dead letter
-- stays, as its attempt log does (purge_attempts): a replay puts the event back,
-- and must find its task.
-- FOR UPDATE SKIP LOCKED: concurrent purges take disjoint batches (as in
-- purge_attempts), and a task a redelivery or replay holds is left to it. The
-- lock also re-reads a row that changed since this statement's snapshot and
-- checks it again: a task whose event was just put back (pending) is not
-- taken, so no outbox row is left pointing at a purged task. The outbox is
-- checked too, for an event queued by anything that left the summary alone.
WITH doomed AS (
    SELECT t.id FROM tasks t
     WHERE t.status = ANY($3::text[])
       AND t.completed_at < $1 AND t.delivery_status <> 'pending'
       AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = t.event_id)
       AND NOT EXISTS (SELECT 1 FROM dead_letters d
                        WHERE d.event_id = t.event_id AND d.replayed_at IS NULL)
     LIMIT $2
       FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM tasks t USING doomed d WHERE t.id = d.id
    RETURNING t.event_id
),
events_gone AS (
    DELETE FROM events e USING gone g WHERE e.event_id = g.event_id
)
SELECT count(*) FROM gone;

-- name: purge_test_events
-- Test events (no task) older than $1 that are finished: neither waiting in
-- the outbox nor an unreplayed dead letter. Their attempt log goes by
-- purge_attempts. Batches of $2.
-- FOR UPDATE SKIP LOCKED: concurrent purges take disjoint batches (as in
-- purge_attempts).
WITH doomed AS (
    SELECT e.event_id FROM events e
     WHERE e.task_id IS NULL AND e.created_at < $1
       AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = e.event_id)
       AND NOT EXISTS (SELECT 1 FROM dead_letters d
                        WHERE d.event_id = e.event_id AND d.replayed_at IS NULL)
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
DELETE FROM events e USING doomed d WHERE e.event_id = d.event_id;

-- name: destination_urls
-- Migration host_keys: every (callback URL, stored host key) pair still in use,
-- so Python can compute each URL's canonical key once (SQL cannot do IDNA).
SELECT callback_url, host FROM outbox GROUP BY 1, 2
UNION
SELECT callback_url, host FROM dead_letters GROUP BY 1, 2;

-- name: rekey_outbox
-- Migration host_keys: $1 callback URLs get the host keys $2.
UPDATE outbox o SET host = m.host
  FROM unnest($1::text[], $2::text[]) AS m(callback_url, host)
 WHERE o.callback_url = m.callback_url AND o.host <> m.host;

-- name: rekey_dead_letters
-- Migration host_keys: as rekey_outbox, for events that may be replayed.
UPDATE dead_letters d SET host = m.host
  FROM unnest($1::text[], $2::text[]) AS m(callback_url, host)
 WHERE d.callback_url = m.callback_url AND d.host <> m.host;

-- name: copy_destinations_rekeyed
-- Migration host_keys: circuit state moves from each old key ($1) to the new
-- keys ($2) it stood for (an old key had no scheme, so it may stand for two).
-- Where several old rows meet one new key, the one with the most failures in
-- a row wins. New keys contain '://', old ones never do, so they cannot clash.
INSERT INTO destinations (host, state, consecutive_failures, last_error, last_failure_at,
                          opened_at, probe_at, updated_at)
SELECT DISTINCT ON (m.new)
       m.new, d.state, d.consecutive_failures, d.last_error, d.last_failure_at,
       d.opened_at, d.probe_at, d.updated_at
  FROM destinations d JOIN unnest($1::text[], $2::text[]) AS m(old, new) ON m.old = d.host
 ORDER BY m.new, d.consecutive_failures DESC, d.updated_at DESC
ON CONFLICT (host) DO NOTHING;

-- name: drop_unkeyed_destinations
-- Migration host_keys: old-style keys go; those no waiting event explained
-- were history only, and the breaker relearns from the next failure.
DELETE FROM destinations WHERE position('://' IN host) = 0;

-- name: count_dead_letters
-- How many letters a bulk replay by this filter would take now (the preview).
SELECT count(*) FROM dead_letters WHERE {{_dead_filter}};

-- name: ops_overview
-- The console's headline figures. The depth is counted up to $1 rows only, so
-- a deep backlog costs a bounded scan. The oldest due event is a scan of the
-- outbox (lanes index due time per lane, not globally), as for /metrics: fine at
-- one refresh per 10 s, and the page is for a person, not a scraper.
SELECT (SELECT count(*) FROM (SELECT 1 FROM outbox LIMIT $1) o) AS depth,
       (SELECT now() - min(GREATEST(next_attempt_at, leased_until)) FROM outbox
         WHERE GREATEST(next_attempt_at, leased_until) <= now()) AS oldest_due,
       (SELECT count(*) FROM dead_letters WHERE failed_at > now() - interval '24 hours')
         AS dead_24h,
       (SELECT count(*) FROM destinations WHERE state <> 'closed') AS open_circuits;

-- name: ops_deliveries_per_minute
-- Attempts per minute and outcome over the last $1 minutes (delivery_attempts_time).
SELECT date_trunc('minute', attempted_at) AS minute, outcome, count(*) AS n
  FROM delivery_attempts
 WHERE attempted_at > now() - make_interval(mins => $1)
 GROUP BY 1, 2
 ORDER BY 1;

-- name: ops_event
-- One event wherever it is: waiting in the outbox, or dead-lettered (replayed
-- or not). A delivered event has left both; its task and attempt log remain.
SELECT o.event_id, o.tenant_id, o.task_id, o.event_type, o.callback_url, e.body, o.created_at,
       'pending' AS state, o.last_error, o.last_status_code
  FROM outbox o JOIN events e USING (event_id) WHERE o.event_id = $1
UNION ALL
SELECT event_id, tenant_id, task_id, event_type, callback_url, body, created_at,
       CASE WHEN replayed_at IS NULL THEN 'dead' ELSE 'replayed' END, last_error,
       last_status_code
  FROM dead_letters WHERE event_id = $1
 LIMIT 1;

-- name: ops_event_attempts
SELECT event_id, number, attempted_at, duration_ms, outcome, status_code, error, response_prefix
  FROM delivery_attempts
 WHERE event_id = $1
 ORDER BY number;

-- name: ops_close_circuit
-- A manual close: the host is healthy again as far as the operator knows. Its
-- held events become claimable at the next claim; the NOTIFY ($2, the outbox
-- channel) wakes the dispatchers at commit. Rows moved out of the way while
-- it was open (hold_lanes) are due again at once, as when a probe succeeds;
-- `was` reads held_until before `closed` clears it (one snapshot for all CTEs).
WITH was AS (
    SELECT host, held_until FROM destinations WHERE host = $1 AND state <> 'closed'
),
closed AS (
    UPDATE destinations
       SET state = 'closed', consecutive_failures = 0, opened_at = NULL, probe_at = NULL,
           held_until = NULL, updated_at = now()
     WHERE host = $1 AND state <> 'closed'
 RETURNING host),
released AS (
    UPDATE outbox o SET next_attempt_at = now()
      FROM was w
     WHERE o.host = w.host AND o.next_attempt_at = w.held_until
)
SELECT host, pg_notify($2, '') FROM closed;

-- name: ops_audit_insert
INSERT INTO ops_audit (actor, action, count, filter, reason)
VALUES ($1, $2, $3, $4::jsonb, $5);

-- name: ops_audit_list
SELECT id, at, actor, action, count, filter::text, reason
  FROM ops_audit
 ORDER BY at DESC, id DESC
 LIMIT $1;

-- name: defer_leases
-- A local fault (our resolver, file descriptors, HTTP pool): rows go back with
-- their attempt budget unspent, due again in $3 s so that a fault that
-- persists does not turn into a claim-fail-release loop. Fenced on the token.
-- $4: the fault was a bug of ours in this event's attempt, counted like a lost
-- lease (lost_leases), since it may well fail the same way every time.
UPDATE outbox
   SET leased_until = now() + make_interval(secs => $3), lease_token = NULL, lease_owner = NULL,
       lost_leases = lost_leases + $4::int
 WHERE id = ANY($1::bigint[]) AND lease_token = $2;

-- name: abandon_leases
-- Rows $1 (under token $2) that are not to be sent: their leases ran out too many
-- times in a row with no outcome written (lost_leases), or their stored event is
-- gone. Dead-lettered with the reasons $3, one per row. No attempt is logged (none
-- was made now, and writing the log may be what keeps failing); the task's summary
-- says dead, and why. A row whose stored event is gone has no body for a letter,
-- and one whose tenant is gone has no one to replay it: those are only removed.
-- A keyed row hands its key on (_hand_on_keys), as record_outcomes does.
-- Returns each row taken, and whether it has a letter.
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $3::text[]) AS i(id, error)
),
dead AS (
    DELETE FROM outbox o USING input i
     WHERE o.id = i.id AND o.lease_token = $2
    RETURNING o.*, i.error
),
buried AS (
    INSERT INTO dead_letters AS d (event_id, tenant_id, task_id, event_type, callback_url, host,
                                   body, created_at, attempts, last_error, last_status_code,
                                   ordering_key)
    SELECT x.event_id, x.tenant_id, x.task_id, x.event_type, x.callback_url, x.host, e.body,
           x.created_at, x.attempts, x.error, x.last_status_code, x.ordering_key
      FROM dead x JOIN events e ON e.event_id = x.event_id
     WHERE EXISTS (SELECT 1 FROM tenants t WHERE t.id = x.tenant_id)
    ON CONFLICT (event_id) DO UPDATE
       SET failed_at = now(), attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
           last_status_code = EXCLUDED.last_status_code, callback_url = EXCLUDED.callback_url,
           host = EXCLUDED.host, ordering_key = EXCLUDED.ordering_key,
           replayed_at = NULL, replayed_by = NULL
    RETURNING d.event_id
),
gone AS (SELECT tenant_id, ordering_key FROM dead), {{_hand_on_keys}},
summary AS (
    UPDATE tasks t
       SET delivery_status = 'dead', last_error = x.error, next_attempt_at = NULL,
           updated_at = now()
      FROM dead x
     WHERE t.id = x.task_id AND t.event_id = x.event_id
)
SELECT x.id, x.event_id IN (SELECT event_id FROM buried) FROM dead x;

-- name: _change_rows
-- A logged change rendered as the task was at that version: what a change can
-- alter from the log's state, the immutable fields and the delivery summary
-- (as it is now) from tasks. A change of a task purged since is left out.
SELECT c.seq, c.changed_at,
       t.id, t.tenant_id, t.type, c.state ->> 'status' AS status, t.input,
       c.state -> 'result' AS result, c.state -> 'error' AS error,
       t.callback_url, t.metadata, t.created_at,
       (c.state ->> 'updatedAt')::timestamptz AS updated_at,
       (c.state ->> 'completedAt')::timestamptz AS completed_at,
       t.timeout_at, c.version, t.event_id, t.delivery_status, t.delivery_attempts,
       t.last_attempt_at, t.last_status_code, t.last_error, t.next_attempt_at, t.delivered_at,
       NULLIF(c.state -> 'progress', 'null'::jsonb) AS progress,
       t.heartbeat_timeout_s, t.heartbeat_at, t.heartbeat_due_at, t.on_timeout,
       (SELECT h.names FROM callback_headers h WHERE h.task_id = t.id) AS callback_header_names,
       (SELECT k.ordering_key FROM task_ordering_keys k WHERE k.task_id = t.id) AS ordering_key
  FROM task_changes c JOIN tasks t ON t.id = c.task_id

-- name: number_changes
-- Numbers up to $1 committed changes waiting in task_change_queue and moves them
-- into task_changes, with one NOTIFY at commit (number_task_changes in schema.sql
-- says why that gives no gap and no duplicate). Returns nothing, without taking
-- any lock, when the queue is empty.
SELECT stream_tenant, stream_last_seq, numbered FROM number_task_changes($1);

-- name: number_changes_and_wake
-- number_changes, and in the same transaction NOTIFY $2 with payload $3: the
-- dispatchers' wake-up after an API's commits of new events, one per burst. Sent
-- after those commits, not in them: the writers' transactions send no NOTIFY, and so
-- never queue on the lock that serialises notifying commits across the cluster. Sent
-- with the numbering those commits ask for anyway: one round trip, not two, and the
-- numberer notifies at this commit already, so that lock is taken no more often.
-- The payload names the sending process: its own dispatcher, woken directly at each
-- commit, need not look again. One row, all NULL, when nothing was numbered.
WITH woken AS (SELECT pg_notify($2, $3))
SELECT n.stream_tenant, n.stream_last_seq, n.numbered
  FROM woken LEFT JOIN number_task_changes($1) n ON true;

-- name: changes_after
-- One tenant's changes after seq $2, in seq (= commit) order (the primary key).
{{_change_rows}}
 WHERE c.tenant_id = $1 AND c.seq > $2
 ORDER BY c.seq
 LIMIT $3;

-- name: task_changes_after
-- One task's changes after version $2, in order (task_changes_task).
{{_change_rows}}
 WHERE c.task_id = $1 AND c.version > $2
 ORDER BY c.version
 LIMIT $3;

-- name: stream_position
-- A tenant's last change number (0 before its first) and the oldest one the
-- log still holds (NULL when retention left none).
SELECT COALESCE((SELECT last_seq FROM tenant_streams WHERE tenant_id = $1), 0) AS last_seq,
       (SELECT min(seq) FROM task_changes WHERE tenant_id = $1) AS oldest_seq;

-- name: task_oldest_version
-- The oldest version of a task the log still holds (NULL: none).
SELECT min(version) FROM task_changes WHERE task_id = $1;

-- name: current_changes
-- A WebSocket subscribe: the tenant's tasks among $2 as they are now, each with
-- the number and time of the change that made its current version (from
-- task_changes_task; seq NULL once retention purged it). Another tenant's task is
-- not found, exactly like a task that does not exist.
SELECT c.seq, COALESCE(c.changed_at, t.updated_at) AS changed_at, t.*,
       (SELECT h.names FROM callback_headers h WHERE h.task_id = t.id) AS callback_header_names,
       (SELECT k.ordering_key FROM task_ordering_keys k WHERE k.task_id = t.id) AS ordering_key
  FROM tasks t LEFT JOIN task_changes c ON c.task_id = t.id AND c.version = t.version
 WHERE t.tenant_id = $1 AND t.id = ANY($2::text[]);

-- name: purge_changes
-- Changes older than the stream retention, $2 at a time (task_changes_at).
-- FOR UPDATE SKIP LOCKED: concurrent purges take disjoint batches (as in
-- purge_attempts).
WITH doomed AS (
    SELECT tenant_id, seq FROM task_changes WHERE changed_at < $1 LIMIT $2
       FOR UPDATE SKIP LOCKED
)
DELETE FROM task_changes c USING doomed d WHERE c.tenant_id = d.tenant_id AND c.seq = d.seq;

-- name: purge_ordering_keys
-- Ordering keys (0024) with nothing waiting, $1 at a time: a key per customer or
-- document would otherwise keep its row for ever. Gone, a key starts again at place 1
-- the next time, which orders nothing wrongly: places only order the events waiting.
-- FOR UPDATE SKIP LOCKED: a key being written or handed on is left; the lock's recheck
-- reads pending as last committed, so a key that has just queued an event stays.
WITH doomed AS (
    SELECT tenant_id, ordering_key FROM ordering_keys WHERE pending = 0 LIMIT $1
       FOR UPDATE SKIP LOCKED
)
DELETE FROM ordering_keys k USING doomed d
 WHERE k.tenant_id = d.tenant_id AND k.ordering_key = d.ordering_key
   AND NOT EXISTS (SELECT 1 FROM outbox o
                    WHERE o.tenant_id = k.tenant_id AND o.ordering_key = k.ordering_key);

-- name: notification_settings_get
-- Where tenant $1 is told about its delivery trouble (0021), or no row.
SELECT url, events, updated_at FROM notification_settings WHERE tenant_id = $1;

-- name: notification_settings_put
-- Set (or replace) tenant $1's notification URL $2 (destination key $3) and
-- the event types $4 it is told about.
INSERT INTO notification_settings AS n (tenant_id, url, host, events)
VALUES ($1, $2, $3, $4::text[])
ON CONFLICT (tenant_id) DO UPDATE
   SET url = EXCLUDED.url, host = EXCLUDED.host, events = EXCLUDED.events, updated_at = now()
RETURNING url, events, updated_at;

-- name: notification_settings_delete
-- Tenant $1 is told nothing more; notifications already queued still go out.
DELETE FROM notification_settings WHERE tenant_id = $1;

-- name: recent_notifications
-- Tenant $1's last $2 notifications (events_notifications) and where each is:
-- waiting in the outbox, dead (an open dead letter) or delivered (its log).
SELECT e.event_id, e.event_type, e.created_at,
       CASE WHEN EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = e.event_id) THEN 'pending'
            WHEN EXISTS (SELECT 1 FROM dead_letters d
                          WHERE d.event_id = e.event_id AND d.replayed_at IS NULL) THEN 'dead'
            WHEN EXISTS (SELECT 1 FROM delivery_attempts a
                          WHERE a.event_id = e.event_id AND a.outcome = 'delivered')
            THEN 'delivered'
            ELSE 'unknown' END AS state,
       e.body
  FROM events e
 WHERE e.tenant_id = $1
   AND e.event_type IN ('delivery.dead', 'destination.unhealthy', 'destination.recovered')
 ORDER BY e.created_at DESC
 LIMIT $2;

-- name: portal_link_insert
-- A portal link for tenant $2 (0023): the token's SHA-256 $1, read-only $3, made
-- by $4, openable for $5 seconds. The tenant's current key hash goes with it, so a
-- rotation before the opening makes it unopenable. No row: no such tenant.
INSERT INTO portal_links (token_hash, tenant_id, api_key_hash, read_only, created_by, expires_at)
SELECT $1, t.id, t.api_key_hash, $3, $4, now() + make_interval(secs => $5)
  FROM tenants t WHERE t.id = $2
RETURNING expires_at;

-- name: portal_links_purge
-- Links a day past their opening deadline are of no use, opened or not
-- (portal_links_expiry); run when a link is made, so the table stays small.
DELETE FROM portal_links WHERE expires_at < now() - interval '1 day';

-- name: portal_link_open
-- The one opening of link $1: only if never opened, not expired, and made under the
-- tenant's current API key. One statement, so two openings at once cannot both win.
UPDATE portal_links l
   SET opened_at = now()
  FROM tenants t
 WHERE l.token_hash = $1 AND l.opened_at IS NULL AND l.expires_at > now()
   AND t.id = l.tenant_id AND t.api_key_hash = l.api_key_hash
RETURNING l.tenant_id, t.name, l.read_only, t.api_key_hash;

-- name: portal_tenant_key
-- What a portal session is checked against at every request: the tenant still
-- exists, under the API key it had when the session opened.
SELECT name, api_key_hash FROM tenants WHERE id = $1;

-- name: portal_tasks
-- The portal's task list: tenant $1's tasks, the latest change first, filtered by
-- status $2, type $3, delivery state $4, last changed in [$5, $6); keyset paging
-- before ($7, $8) on (updated_at, id), tasks_tenant_updated read backwards. A
-- page for a person, who reloads: no horizon as list_tasks has for reconcilers.
SELECT t.*, (SELECT h.names FROM callback_headers h WHERE h.task_id = t.id) AS callback_header_names,
       (SELECT k.ordering_key FROM task_ordering_keys k WHERE k.task_id = t.id) AS ordering_key
  FROM tasks t
 WHERE tenant_id = $1
   AND ($2::text IS NULL OR status = $2)
   AND ($3::text IS NULL OR type = $3)
   AND ($4::text IS NULL OR delivery_status = $4)
   AND ($5::timestamptz IS NULL OR updated_at >= $5)
   AND ($6::timestamptz IS NULL OR updated_at < $6)
   AND ($7::timestamptz IS NULL OR (updated_at, id) < ($7, $8::text))
 ORDER BY updated_at DESC, id DESC
 LIMIT $9;

-- name: portal_delivery_figures
-- Tenant $1's attempts in the last 24 h (delivery_attempts_time, then the tenant):
-- per outcome, how many in the last hour and in the day.
SELECT outcome,
       count(*) FILTER (WHERE attempted_at > now() - interval '1 hour') AS hour,
       count(*) AS day
  FROM delivery_attempts
 WHERE attempted_at > now() - interval '24 hours' AND tenant_id = $1
 GROUP BY outcome;

-- name: portal_attempt_durations
-- The median and 95th percentile of tenant $1's attempt durations over the last 24 h.
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) AS p95
  FROM delivery_attempts
 WHERE attempted_at > now() - interval '24 hours' AND tenant_id = $1;

-- name: portal_deliveries_per_hour
-- Tenant $1's attempts per hour and outcome over the last 24 h, for the chart.
SELECT date_trunc('hour', attempted_at) AS hour, outcome, count(*) AS n
  FROM delivery_attempts
 WHERE attempted_at > now() - interval '24 hours' AND tenant_id = $1
 GROUP BY 1, 2
 ORDER BY 1;

-- name: portal_open_circuits
-- The circuits not closed that hold tenant $1's webhooks: told of the episode
-- (destination_notices) or with a row of the tenant's waiting for the host.
SELECT d.host, d.state, d.consecutive_failures, d.last_error, d.probe_at
  FROM destinations d
 WHERE d.state <> 'closed'
   AND (EXISTS (SELECT 1 FROM destination_notices n WHERE n.host = d.host AND n.tenant_id = $1)
        OR EXISTS (SELECT 1 FROM outbox o WHERE o.host = d.host AND o.tenant_id = $1))
 ORDER BY d.host
 LIMIT 100;
