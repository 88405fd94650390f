-- 0001: the schema as first released (before numbered migrations). Databases
-- created then are adopted: the runner records 0001 without running it again.

-- Partners. The API key is stored as its SHA-256 only: keys are 256-bit random,
-- so a fast hash is enough and lookups stay one index probe.
CREATE TABLE IF NOT EXISTS tenants (
    id            text PRIMARY KEY,
    name          text NOT NULL,
    api_key_hash  bytea NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- Signing secrets, AES-GCM encrypted with the master key (tenant id as AAD).
-- A rotation gives the old secret an expires_at; until then both sign.
CREATE TABLE IF NOT EXISTS signing_secrets (
    id          bigserial PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    secret_enc  bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz
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
    delivered_at          timestamptz
);
-- Reconciliation listing: keyset on (updated_at, id) within a tenant.
CREATE INDEX IF NOT EXISTS tasks_tenant_updated ON tasks (tenant_id, updated_at, id);
-- The sweeper only ever looks at live tasks with a deadline.
CREATE INDEX IF NOT EXISTS tasks_timeout_due ON tasks (timeout_at)
    WHERE timeout_at IS NOT NULL AND status IN ('queued', 'running');

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

-- Events waiting to be delivered. Delivered rows leave the table, so it holds
-- only live work and stays small however much traffic has passed through.
CREATE TABLE IF NOT EXISTS outbox (
    id               bigserial PRIMARY KEY,
    event_id         text NOT NULL UNIQUE,
    tenant_id        text NOT NULL,
    task_id          text NOT NULL,
    event_type       text NOT NULL,
    callback_url     text NOT NULL,
    -- Destination host, so a claim can skip hosts already at their
    -- concurrency cap instead of leasing rows it cannot send yet.
    host             text NOT NULL,
    -- The exact bytes that are signed and sent, fixed at commit time so every
    -- retry and replay carries an identical body.
    body             text NOT NULL,
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
    last_status_code integer
);
-- A row is due when its schedule has come and any lease on it has run out.
-- GREATEST ignores NULLs, so an unleased row is due at next_attempt_at; the
-- claim query orders by exactly this expression to use the index.
CREATE INDEX IF NOT EXISTS outbox_due ON outbox ((GREATEST(next_attempt_at, leased_until)));
-- The outbox is a queue: each row is inserted, updated by its claim and deleted
-- within seconds, leaving two dead versions behind. At the default 20 % scale
-- factor a deep backlog drains without autovacuum ever starting (measured in
-- bench/backlog.py), so vacuum after a fixed amount of churn, unthrottled.
ALTER TABLE outbox SET (
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_vacuum_cost_delay = 0
);

-- Every attempt, delivered or not. (event_id, number) is unique, so the same
-- attempt can never be recorded twice, whichever dispatcher made it.
CREATE TABLE IF NOT EXISTS delivery_attempts (
    id               bigserial PRIMARY KEY,
    event_id         text NOT NULL,
    task_id          text NOT NULL,
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
    task_id          text NOT NULL,
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
    replay_count     integer NOT NULL DEFAULT 0
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
    updated_at            timestamptz NOT NULL DEFAULT now()
);
