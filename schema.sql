-- hookrelay schema, whole and current: the place to read it. Databases are built
-- and upgraded by the numbered files in outbox/sql/migrations/ (`hookrelay migrate`);
-- a test proves that running them all gives exactly this schema, so a change
-- goes into a new migration and here, together.

-- Which migrations have run. The runner creates it before anything else.
CREATE TABLE IF NOT EXISTS schema_version (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    -- Declared by the migration's file (0014): a process of an earlier release,
    -- which does not know this migration, may run beside it.
    compatible  boolean NOT NULL DEFAULT false
);

-- Partners. The API key is stored as its SHA-256 only: keys are 256-bit random,
-- so a fast hash is enough and lookups stay one index probe.
CREATE TABLE IF NOT EXISTS tenants (
    id            text PRIMARY KEY,
    name          text NOT NULL,
    api_key_hash  bytea NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- +1 at every signing-key rotation (0003); read with each claimed event so
    -- the dispatcher's cached signer is replaced as soon as a rotation commits.
    secret_version integer NOT NULL DEFAULT 1,
    -- Which signatures its webhooks carry (0008): v1 HMAC, v1a Ed25519, or both.
    signature_scheme text NOT NULL DEFAULT 'v1'
        CHECK (signature_scheme IN ('v1', 'v1a', 'both'))
);

-- Signing secrets, AES-GCM encrypted with the master key (tenant id as AAD):
-- whsec_ HMAC secrets (scheme v1) and whsk_ Ed25519 private keys (scheme v1a,
-- with their whpk_ public key beside them in the clear).
-- A rotation gives the old secret an expires_at; until then both sign.
CREATE TABLE IF NOT EXISTS signing_secrets (
    id          bigserial PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    secret_enc  bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    scheme      text NOT NULL DEFAULT 'v1' CHECK (scheme IN ('v1', 'v1a')),
    public_key  text
);
CREATE INDEX IF NOT EXISTS signing_secrets_tenant ON signing_secrets (tenant_id, created_at DESC);

CREATE TABLE IF NOT EXISTS tasks (
    id              text PRIMARY KEY,
    tenant_id       text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    type            text NOT NULL,
    status          text NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out')),
    input           jsonb,
    result          jsonb,
    error           jsonb,
    callback_url    text NOT NULL,
    metadata        jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    timeout_at      timestamptz,
    version         integer NOT NULL DEFAULT 1,
    -- Delivery summary of the terminal event, kept beside the task so a status
    -- read is one row; the dispatcher updates it with each batch of outcomes.
    event_id              text,
    delivery_status       text NOT NULL DEFAULT 'none'
        CHECK (delivery_status IN ('none', 'pending', 'delivered', 'dead')),
    delivery_attempts     integer NOT NULL DEFAULT 0,
    last_attempt_at       timestamptz,
    last_status_code      integer,
    last_error            text,
    next_attempt_at       timestamptz,
    delivered_at          timestamptz,
    -- Progress and heartbeats (0007): the last report, {percent, message,
    -- updatedAt}; the executor's heartbeat budget; when it last started or
    -- reported; the deadline that budget gives (NULL unless running with one);
    -- and what to write onto the task if it times out, {result?, error?}.
    progress              jsonb,
    heartbeat_timeout_s   double precision,
    heartbeat_at          timestamptz,
    heartbeat_due_at      timestamptz,
    on_timeout            jsonb
);
-- Reconciliation listing: keyset on (updated_at, id) within a tenant.
CREATE INDEX IF NOT EXISTS tasks_tenant_updated ON tasks (tenant_id, updated_at, id);
-- The sweeper only ever looks at live tasks with a deadline.
CREATE INDEX IF NOT EXISTS tasks_timeout_due ON tasks (timeout_at)
    WHERE timeout_at IS NOT NULL AND status IN ('queued', 'running');
-- ... and at running tasks whose executor stopped reporting (0007).
CREATE INDEX IF NOT EXISTS tasks_heartbeat_due ON tasks (heartbeat_due_at)
    WHERE heartbeat_due_at IS NOT NULL AND status = 'running';
-- Stuck-work gauges read running tasks by their last sign of life (0007).
CREATE INDEX IF NOT EXISTS tasks_running ON tasks (heartbeat_at) WHERE status = 'running';

-- Idempotency-Key records, scoped to the tenant. request_hash is SHA-256 of the
-- canonical request body, so a reused key with a different body is detected.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    tenant_id     text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    key           text NOT NULL,
    request_hash  bytea NOT NULL,
    task_id       text NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
-- A purged task's key goes with it (ON DELETE CASCADE): found by task (0015).
CREATE INDEX IF NOT EXISTS idempotency_keys_task ON idempotency_keys (task_id);

-- Every event, written once when it is committed and never changed (0010).
-- body is the exact bytes that are signed and sent, fixed at commit so every
-- attempt, retry, replay and redelivery carries an identical body. Kept apart
-- from outbox so the row each claim rewrites stays small.
CREATE TABLE IF NOT EXISTS events (
    event_id    text PRIMARY KEY,
    tenant_id   text NOT NULL,
    -- NULL for an event that belongs to no task.
    task_id     text,
    event_type  text NOT NULL,
    body        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Events waiting to be delivered. Delivered rows leave the table, so it holds
-- only live work and stays small however much traffic has passed through.
CREATE TABLE IF NOT EXISTS outbox (
    id               bigserial PRIMARY KEY,
    event_id         text NOT NULL UNIQUE,
    tenant_id        text NOT NULL,
    -- NULL for a test event (0009): it belongs to no task.
    task_id          text,
    event_type       text NOT NULL,
    callback_url     text NOT NULL,
    -- Destination host, so a claim can skip hosts already at their
    -- concurrency cap instead of leasing rows it cannot send yet.
    host             text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    -- attempts counts every attempt ever made (numbering in delivery_attempts);
    -- budget_used counts those since the last replay (the retry policy's n).
    attempts         integer NOT NULL DEFAULT 0,
    budget_used      integer NOT NULL DEFAULT 0,
    leased_until     timestamptz,
    lease_token      uuid,
    lease_owner      text,
    last_error       text,
    last_status_code integer,
    -- Leases in a row that ran out with no outcome written (0016): a claim taking
    -- over a row still under a token adds one, a recorded outcome resets it; at the
    -- dispatcher's limit the event is dead-lettered rather than sent again.
    lost_leases      integer NOT NULL DEFAULT 0,
    -- Ordered delivery (0024): the task's orderingKey and the row's place in the key's
    -- queue, in commit order. Only the key's head is due; the rest wait parked at
    -- next_attempt_at 'infinity' until the head leaves (delivered or dead).
    ordering_key     text,
    ordering_seq     bigint
);
-- A row is due when its schedule has come and any lease on it has run out.
-- Lanes (0006): a lane is one tenant's events to one host. This index keeps
-- each lane's rows together in schedule order: finding the lanes with due work
-- is a skip scan (two probes per lane) and a lane's claim reads only what it
-- takes and the lane's leased rows, so rows held back anywhere cost the claims
-- nothing (outbox/dispatch/scheduler.py). The lease is in no index (0011), so a claim's
-- UPDATE, which writes only the lease, is HOT.
CREATE INDEX IF NOT EXISTS outbox_lane_due
    ON outbox (host, tenant_id, next_attempt_at);
-- The outbox is a queue: each row is inserted, updated by its claim and deleted
-- within seconds, leaving two dead versions behind. At the default 20 % scale
-- factor a deep backlog drains without autovacuum ever starting (measured in
-- bench/backlog.py), so vacuum after a fixed amount of churn, unthrottled.
-- Fillfactor 40 (0011): room in each page for the longer version a claim writes.
ALTER TABLE outbox SET (
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_vacuum_cost_delay = 0, fillfactor = 40
);

-- Every attempt, delivered or not. (event_id, number) is unique, so the same
-- attempt can never be recorded twice, whichever dispatcher made it.
CREATE TABLE IF NOT EXISTS delivery_attempts (
    id               bigserial PRIMARY KEY,
    event_id         text NOT NULL,
    task_id          text,
    tenant_id        text NOT NULL,
    number           integer NOT NULL,
    attempted_at     timestamptz NOT NULL,
    duration_ms      double precision NOT NULL,
    outcome          text NOT NULL CHECK (outcome IN ('delivered', 'retry', 'dead')),
    status_code      integer,
    error            text,
    response_prefix  text,
    UNIQUE (event_id, number)
);
CREATE INDEX IF NOT EXISTS delivery_attempts_task ON delivery_attempts (task_id, number);
CREATE INDEX IF NOT EXISTS delivery_attempts_time ON delivery_attempts (attempted_at);

-- Events the dispatcher gave up on. A replay puts the event back into outbox
-- (same event id) and stamps replayed_at/replayed_by here; if it dies again the
-- row is refreshed and becomes visible again.
CREATE TABLE IF NOT EXISTS dead_letters (
    event_id         text PRIMARY KEY,
    tenant_id        text NOT NULL,
    task_id          text,
    event_type       text NOT NULL,
    callback_url     text NOT NULL,
    host             text NOT NULL,
    body             text NOT NULL,
    created_at       timestamptz NOT NULL,
    failed_at        timestamptz NOT NULL DEFAULT now(),
    attempts         integer NOT NULL,
    last_error       text,
    last_status_code integer,
    replayed_at      timestamptz,
    replayed_by      text,
    replay_count     integer NOT NULL DEFAULT 0,
    -- The event's orderingKey (0024): the key's later webhooks went on without it.
    ordering_key     text
);
CREATE INDEX IF NOT EXISTS dead_letters_live ON dead_letters (failed_at, event_id)
    WHERE replayed_at IS NULL;
CREATE INDEX IF NOT EXISTS dead_letters_tenant ON dead_letters (tenant_id, failed_at)
    WHERE replayed_at IS NULL;

-- Destination health (per-host circuit breaker), shared by every dispatcher.
-- Open: the host's due deliveries are held (not claimed, so no attempt budget
-- is spent) until probe_at; then one dispatcher takes the probe right
-- (half-open) and sends a single delivery. A success closes the circuit.
CREATE TABLE IF NOT EXISTS destinations (
    host                  text PRIMARY KEY,
    state                 text NOT NULL DEFAULT 'closed'
        CHECK (state IN ('closed', 'open', 'half-open')),
    consecutive_failures  integer NOT NULL DEFAULT 0,
    last_error            text,
    last_failure_at       timestamptz,
    opened_at             timestamptz,
    probe_at              timestamptz,
    updated_at            timestamptz NOT NULL DEFAULT now(),
    -- (0006) While the circuit is not closed, the host's waiting rows are moved
    -- to this time, out of every claim's way; its closing puts them back.
    held_until            timestamptz
);

-- Which master key the signing secrets are encrypted under (0002). One row,
-- written by the first process that opens the database with a key: a short id
-- of the key (never the key) and a known value sealed with it, so a process
-- holding another key is refused at start.
CREATE TABLE IF NOT EXISTS master_key_check (
    id          smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    key_id      text NOT NULL,
    check_enc   bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The operations console's audit trail (0005): every replay (one or bulk) and
-- every manual circuit close, with who, when, how many, the filter and the reason.
CREATE TABLE IF NOT EXISTS ops_audit (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL,
    -- The portal's actions too (0023): a partner's redeliveries, settings and keys.
    action      text NOT NULL CHECK (action IN (
        'replay', 'bulk_replay', 'close_circuit', 'redeliver', 'set_notifications',
        'delete_notifications', 'test_notification', 'rotate_secret', 'test_event')),
    count       integer NOT NULL,
    filter      jsonb NOT NULL DEFAULT '{}',
    reason      text NOT NULL
);
CREATE INDEX IF NOT EXISTS ops_audit_at ON ops_audit (at DESC, id DESC);

-- The change log behind the status streams (0012, 0013): one row per new version
-- of a task, numbered per tenant, in commit order. A deferred trigger on tasks
-- appends each change to task_change_queue at commit, so it records every writer
-- (API, sweeper, console, an executor's own transaction through any driver) and
-- nothing that rolls back, and takes no lock another writer waits on. A numberer
-- (number_task_changes, below) then gives queued changes their numbers and moves
-- them here. state holds only what a change can alter; the immutable fields are
-- read from tasks.
CREATE TABLE IF NOT EXISTS task_changes (
    tenant_id   text NOT NULL,
    seq         bigint NOT NULL,
    task_id     text NOT NULL,
    version     integer NOT NULL,
    changed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    state       jsonb NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);
-- A task's own stream resumes by version; retention purges by age.
CREATE INDEX IF NOT EXISTS task_changes_task ON task_changes (task_id, version);
CREATE INDEX IF NOT EXISTS task_changes_at ON task_changes (changed_at);

-- Each tenant's last change number; written by the numberer alone.
CREATE TABLE IF NOT EXISTS tenant_streams (
    tenant_id  text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    last_seq   bigint NOT NULL
);

-- Changes committed and not yet numbered (0013): the trigger's only write.
CREATE TABLE IF NOT EXISTS task_change_queue (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   text NOT NULL,
    task_id     text NOT NULL,
    version     integer NOT NULL,
    state       jsonb NOT NULL
);
-- Every row is deleted within moments of its insert: vacuum it often, or the dead rows
-- of a busy hour make each look at an empty queue read them all.
ALTER TABLE task_change_queue SET (autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);

-- Runs at commit (DEFERRABLE INITIALLY DEFERRED), once per new version, with the
-- row as that version left it: two changes in one transaction are two entries,
-- and a queued change's id follows commit order.
CREATE OR REPLACE FUNCTION record_task_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_change_queue (tenant_id, task_id, version, state)
    VALUES (NEW.tenant_id, NEW.id, NEW.version,
            jsonb_build_object('status', NEW.status, 'result', NEW.result,
                               'error', NEW.error, 'progress', NEW.progress,
                               'updatedAt', NEW.updated_at, 'completedAt', NEW.completed_at));
    RETURN NULL;
END
$$;
-- Only a new version is a change: delivery-summary updates leave version alone.
DROP TRIGGER IF EXISTS tasks_inserted ON tasks;
CREATE CONSTRAINT TRIGGER tasks_inserted AFTER INSERT ON tasks
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION record_task_change();
DROP TRIGGER IF EXISTS tasks_versioned ON tasks;
CREATE CONSTRAINT TRIGGER tasks_versioned AFTER UPDATE ON tasks
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.version IS DISTINCT FROM NEW.version) EXECUTE FUNCTION record_task_change();

-- Numbers up to max_rows queued changes and moves them into task_changes; returns
-- each tenant it numbered for, with its new last number and how many it got.
-- Why no gap and no duplicate: numbers are handed out only here, and the advisory
-- lock lets one numberer run at a time. The statement that takes the queue starts
-- after the lock is granted, so under READ COMMITTED it sees every change
-- committed before then; a change committing later stays queued for the next
-- run, which numbers it above everything numbered now. So a reader that has seen
-- change N of a tenant has seen every change below N, and nothing is numbered
-- twice (the rows leave the queue in the transaction that numbers them). Within
-- a batch a tenant's changes are numbered by queue id, the order in which their
-- transactions reached commit (the triggers run then); two versions of one task
-- are in version order, since the later one could only be written after the
-- earlier one committed. A change's changed_at is when it is numbered, so it
-- rises with seq and retention (by changed_at) only ever purges a prefix.
-- The NOTIFY (channel hookrelay_changes) goes out at commit: one line per tenant,
-- "<tenant id> <last number> <task id> ...", task ids split over several lines
-- (and notifications) so that none exceeds PostgreSQL's payload limit.
CREATE OR REPLACE FUNCTION number_task_changes(max_rows integer)
RETURNS TABLE (stream_tenant text, stream_last_seq bigint, numbered integer)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    task text;
    line text;
    payload text := '';
BEGIN
    -- The usual answer to a look with nothing waiting: no lock, no write. Through the
    -- index, which skips the entries of rows already numbered and deleted.
    PERFORM 1 FROM task_change_queue ORDER BY id LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(7240114);
    FOR r IN
        WITH taken AS (
            DELETE FROM task_change_queue q
             WHERE q.id IN (SELECT id FROM task_change_queue ORDER BY id LIMIT max_rows)
            RETURNING q.id, q.tenant_id, q.task_id, q.version, q.state
        ), ranked AS (
            -- A tenant deleted since leaves its queued changes to nobody.
            SELECT t.*, row_number() OVER (PARTITION BY t.tenant_id ORDER BY t.id) AS n,
                   count(*) OVER (PARTITION BY t.tenant_id) AS total
              FROM taken t
             WHERE EXISTS (SELECT 1 FROM tenants WHERE tenants.id = t.tenant_id)
        ), per_tenant AS (
            SELECT ranked.tenant_id, count(*) AS total,
                   array_agg(DISTINCT ranked.task_id) AS task_ids
              FROM ranked GROUP BY ranked.tenant_id
        ), bumped AS (
            INSERT INTO tenant_streams AS s (tenant_id, last_seq)
            SELECT p.tenant_id, p.total FROM per_tenant p
            ON CONFLICT (tenant_id) DO UPDATE SET last_seq = s.last_seq + EXCLUDED.last_seq
            RETURNING s.tenant_id, s.last_seq
        ), logged AS (
            INSERT INTO task_changes (tenant_id, seq, task_id, version, changed_at, state)
            SELECT ranked.tenant_id, b.last_seq - ranked.total + ranked.n, ranked.task_id,
                   ranked.version, clock_timestamp(), ranked.state
              FROM ranked JOIN bumped b ON b.tenant_id = ranked.tenant_id
        )
        SELECT b.tenant_id, b.last_seq, p.task_ids, p.total::integer AS n
          FROM bumped b JOIN per_tenant p ON p.tenant_id = b.tenant_id
    LOOP
        line := r.tenant_id || ' ' || r.last_seq;
        FOREACH task IN ARRAY r.task_ids LOOP
            IF length(payload) + length(line) + length(task) > 7000 THEN
                PERFORM pg_notify('hookrelay_changes', payload || line);
                payload := '';
                line := r.tenant_id || ' ' || r.last_seq;
            END IF;
            line := line || ' ' || task;
        END LOOP;
        payload := payload || line || E'\n';
        stream_tenant := r.tenant_id;
        stream_last_seq := r.last_seq;
        numbered := r.n;
        RETURN NEXT;
    END LOOP;
    IF payload <> '' THEN
        PERFORM pg_notify('hookrelay_changes', rtrim(payload, E'\n'));
    END IF;
END
$$;

-- A deleted tenant takes its undelivered work with it (0017): its tasks, keys and
-- secrets go by ON DELETE CASCADE; the tables without a foreign key to tenants (one
-- would cost every event a lookup and a lock on its tenant's row) by this trigger,
-- at deletion only. An event in flight then has no row for its outcome (the lease
-- fence refuses it) and is never sent again. Its attempt log goes by retention.
CREATE OR REPLACE FUNCTION forget_tenant() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM outbox WHERE tenant_id = OLD.id;
    DELETE FROM dead_letters WHERE tenant_id = OLD.id;
    DELETE FROM events WHERE tenant_id = OLD.id;
    DELETE FROM task_changes WHERE tenant_id = OLD.id;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS tenants_forgotten ON tenants;
CREATE TRIGGER tenants_forgotten AFTER DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION forget_tenant();

-- The destination key (hookrelay.outbox.destinations) of each callback URL origin
-- (0018), computed by a submit, looked up by the statement that writes a task's
-- event (queries.sql: finish_task), so that a completion needs no Python between
-- its parts. One row per origin; a task whose origin has none (an older release
-- submitted it) is completed the older way. Rewritten if host_key's rules change.
CREATE TABLE IF NOT EXISTS destination_keys (
    origin text PRIMARY KEY,
    host   text NOT NULL
);

-- A callback URL up to its path, query or fragment: scheme://[userinfo@]host[:port],
-- as written. hookrelay.outbox.destinations.host_key depends on no more than that.
CREATE OR REPLACE FUNCTION url_origin(url text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substring(url FROM '^[^/?#]*//[^/?#]*')
$$;

-- A timestamp as the API writes one (0018; msgspec, Python's datetime.isoformat):
-- UTC, a Z, and the microseconds only when there are some. The webhook bodies that
-- finish_task (queries.sql) builds in SQL write their times with it.
CREATE OR REPLACE FUNCTION webhook_time(at timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN extract(microseconds FROM at)::bigint % 1000000 = 0 THEN ''
                ELSE to_char(at AT TIME ZONE 'UTC', '.US') END
        || 'Z'
$$;

-- Callback headers (0019), one row per task that has any: their values sealed under
-- the master key (the task id as associated data), never returned; their names, which
-- the task resource shows. Apart from tasks, so older releases' `SELECT *` on tasks
-- return what they always did.
CREATE TABLE IF NOT EXISTS callback_headers (
    task_id  text PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    names    text[] NOT NULL,
    sealed   bytea NOT NULL
);

-- HOOKRELAY_PER_HOST_RATE (0020): one token bucket per destination host, shared by
-- every dispatcher of the database (take_host_tokens). Empty while no rate is set.
CREATE TABLE IF NOT EXISTS host_rates (
    host         text PRIMARY KEY,
    tokens       double precision NOT NULL,
    granted      integer NOT NULL DEFAULT 0,
    refilled_at  timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50);

-- Notifications (0021): where a tenant is told about its own delivery trouble, the
-- episodes it was told of, and the triggers that queue them through the outbox.
-- Where a tenant is told, and about which events (PUT /v1/notifications). host is
-- the URL's destination key, as outbox.host, so a notification's row is claimed,
-- held and probed like a webhook's.
CREATE TABLE IF NOT EXISTS notification_settings (
    tenant_id   text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    url         text NOT NULL,
    host        text NOT NULL,
    events      text[] NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The tenants told that a host's circuit holds their webhooks, one row per
-- (host, tenant) for the open episode: hold_lanes adds them, the circuit's
-- closing takes them away. Written only while a circuit is open. No foreign key
-- to tenants (hold_lanes would then wait on, and fail with, a tenant being
-- deleted): a deleted tenant's row has no settings left to notify, and goes at
-- the closing like the others.
CREATE TABLE IF NOT EXISTS destination_notices (
    host        text NOT NULL,
    tenant_id   text NOT NULL,
    since       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (host, tenant_id)
);
-- A tenant's last notifications, for the console (a small partial index: events
-- are mostly tasks' webhooks).
CREATE INDEX IF NOT EXISTS events_notifications ON events (tenant_id, created_at DESC)
    WHERE event_type IN ('delivery.dead', 'destination.unhealthy', 'destination.recovered');

-- ISO-8601 in UTC with a Z, as the API writes times.
CREATE OR REPLACE FUNCTION notification_time(ts timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

-- Queue one notification of type kind to the tenant's URL, if it has one and
-- asked for that kind: a stored body {"type", "timestamp", "data"} and its outbox
-- row, under a new event id (evt_ and 26 base32 characters, as hookrelay.outbox.ids).
CREATE OR REPLACE FUNCTION queue_notification(tenant text, kind text, data jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    target notification_settings%ROWTYPE;
    id text;
BEGIN
    SELECT * INTO target FROM notification_settings WHERE tenant_id = tenant;
    IF NOT FOUND OR NOT kind = ANY (target.events) THEN
        RETURN;
    END IF;
    SELECT 'evt_' || string_agg(substr('abcdefghijklmnopqrstuvwxyz234567',
                                       get_byte(r.b, i) % 32 + 1, 1), '' ORDER BY i)
      INTO id
      FROM (SELECT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()) AS b) r,
           generate_series(0, 25) i;
    INSERT INTO events (event_id, tenant_id, task_id, event_type, body)
    VALUES (id, tenant, NULL, kind,
            jsonb_build_object('type', kind, 'timestamp', notification_time(now()),
                               'data', data)::text);
    INSERT INTO outbox (event_id, tenant_id, task_id, event_type, callback_url, host)
    VALUES (id, tenant, NULL, kind, target.url, target.host);
END
$$;

-- delivery.dead: a task's webhook landed in dead letters (first time, or again
-- after a replay). Only a task's: a notification or a test event that dies is
-- dead-lettered and nothing more, so a dead notification URL makes no loop.
CREATE OR REPLACE FUNCTION notify_dead_letter() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM queue_notification(NEW.tenant_id, 'delivery.dead', jsonb_build_object(
        'eventId', NEW.event_id, 'taskId', NEW.task_id, 'callbackUrl', NEW.callback_url,
        'attempts', NEW.attempts, 'lastStatusCode', NEW.last_status_code,
        'lastError', NEW.last_error, 'deadAt', notification_time(NEW.failed_at)));
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS dead_letters_notified ON dead_letters;
CREATE TRIGGER dead_letters_notified AFTER INSERT ON dead_letters
    FOR EACH ROW WHEN (NEW.task_id IS NOT NULL) EXECUTE FUNCTION notify_dead_letter();
DROP TRIGGER IF EXISTS dead_letters_renotified ON dead_letters;
CREATE TRIGGER dead_letters_renotified AFTER UPDATE OF failed_at ON dead_letters
    FOR EACH ROW WHEN (NEW.task_id IS NOT NULL AND NEW.replayed_at IS NULL
                       AND OLD.failed_at IS DISTINCT FROM NEW.failed_at)
    EXECUTE FUNCTION notify_dead_letter();

-- destination.unhealthy: the first time in an episode that a host's circuit holds
-- a tenant's webhooks (hold_lanes inserts the notice), once per (host, tenant).
CREATE OR REPLACE FUNCTION notify_unhealthy() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    d destinations%ROWTYPE;
BEGIN
    SELECT * INTO d FROM destinations WHERE host = NEW.host;
    PERFORM queue_notification(NEW.tenant_id, 'destination.unhealthy', jsonb_build_object(
        'host', NEW.host, 'since', notification_time(COALESCE(d.opened_at, NEW.since)),
        'consecutiveFailures', COALESCE(d.consecutive_failures, 0), 'lastError', d.last_error,
        'heldDeliveries', (SELECT count(*) FROM outbox o
                            WHERE o.host = NEW.host AND o.tenant_id = NEW.tenant_id
                              AND o.task_id IS NOT NULL)));
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS destination_notices_unhealthy ON destination_notices;
CREATE TRIGGER destination_notices_unhealthy AFTER INSERT ON destination_notices
    FOR EACH ROW EXECUTE FUNCTION notify_unhealthy();

-- destination.recovered: the circuit closed (a probe or a delivery answered, or an
-- operator closed it); each tenant told of the episode is told it ended, once.
CREATE OR REPLACE FUNCTION notify_recovered() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    told destination_notices%ROWTYPE;
BEGIN
    FOR told IN DELETE FROM destination_notices WHERE host = NEW.host RETURNING * LOOP
        PERFORM queue_notification(told.tenant_id, 'destination.recovered', jsonb_build_object(
            'host', NEW.host, 'since', notification_time(now()),
            'consecutiveFailures', OLD.consecutive_failures, 'lastError', OLD.last_error,
            'heldDeliveries', (SELECT count(*) FROM outbox o
                                WHERE o.host = NEW.host AND o.tenant_id = told.tenant_id
                                  AND o.task_id IS NOT NULL)));
    END LOOP;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS destinations_recovered ON destinations;
CREATE TRIGGER destinations_recovered AFTER UPDATE OF state ON destinations
    FOR EACH ROW WHEN (OLD.state <> 'closed' AND NEW.state = 'closed')
    EXECUTE FUNCTION notify_recovered();

-- The W3C trace context a task was submitted with (0022): every attempt of its webhook
-- sends a traceparent of that trace with the attempt's own span id. A table of its own
-- so that no plan an older release caches on tasks changes shape; only tasks submitted
-- with a trace context have a row.
CREATE TABLE IF NOT EXISTS task_traces (
    task_id     text PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    traceparent text NOT NULL,
    tracestate  text
);

-- The partner portal's single-use links (0023): only the token's SHA-256 is kept;
-- opened_at is stamped at the one opening. api_key_hash is the tenant's key when the
-- link was made, so a key rotation makes it unopenable.
CREATE TABLE IF NOT EXISTS portal_links (
    token_hash    bytea PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    api_key_hash  bytea NOT NULL,
    read_only     boolean NOT NULL DEFAULT false,
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    opened_at     timestamptz
);
CREATE INDEX IF NOT EXISTS portal_links_expiry ON portal_links (expires_at);
CREATE INDEX IF NOT EXISTS portal_links_tenant ON portal_links (tenant_id);

-- Ordered delivery per key (0024). A task's orderingKey, in a table of its own so that
-- no plan an older release caches on tasks changes shape.
CREATE TABLE IF NOT EXISTS task_ordering_keys (
    task_id       text PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    tenant_id     text NOT NULL,
    ordering_key  text NOT NULL
);
-- One row per key: last_seq hands out the places in the key's queue and pending counts
-- its rows in the outbox. A writer of a keyed event holds this row's lock until it
-- commits, so places follow commit order, and parks its row unless pending was 0.
CREATE TABLE IF NOT EXISTS ordering_keys (
    tenant_id     text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    ordering_key  text NOT NULL,
    last_seq      bigint NOT NULL DEFAULT 0,
    pending       integer NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, ordering_key)
);
-- The sweep (release_stuck_keys) reads only keys with rows waiting.
CREATE INDEX IF NOT EXISTS ordering_keys_pending ON ordering_keys (tenant_id, ordering_key)
    WHERE pending > 0;
-- A key's rows in queue order: the next one after the head, found in one probe.
CREATE INDEX IF NOT EXISTS outbox_ordering ON outbox (tenant_id, ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL;
