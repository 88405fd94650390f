-- hookrelay: runs beside older releases
-- 0024: ordered delivery per key. A task submitted with an orderingKey has its key in
-- task_ordering_keys (a table of its own, as 0019 and 0022, so that no plan an older
-- release caches on tasks changes shape). Its terminal event's outbox row carries the
-- key and its place in the key's queue (ordering_seq, in commit order: taken from
-- ordering_keys under that row's lock, held until the writer commits). Of a key's rows
-- only the head is due; the others wait parked at next_attempt_at 'infinity', after
-- every due row of their lane, so no claim reads them. The outcome that takes the head
-- out of the outbox (delivered or dead) makes the next one due. ordering_keys.pending
-- counts the key's rows in the outbox: a writer parks its row unless it is the only one.
-- Older releases neither read nor write any of it; a keyed row they take out of the
-- outbox leaves its key to the dispatchers' sweep (release_stuck_keys).
-- Every table this migration locks, locked first (see hookrelay.outbox.store.migrations).
LOCK TABLE outbox, dead_letters IN ACCESS EXCLUSIVE MODE;
LOCK TABLE tasks, tenants IN SHARE ROW EXCLUSIVE MODE;
CREATE TABLE IF NOT EXISTS task_ordering_keys (
    task_id       text PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    tenant_id     text NOT NULL,
    ordering_key  text NOT NULL
);
CREATE TABLE IF NOT EXISTS ordering_keys (
    tenant_id     text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    ordering_key  text NOT NULL,
    last_seq      bigint NOT NULL DEFAULT 0,
    pending       integer NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, ordering_key)
);
-- The sweep reads only keys with rows waiting.
CREATE INDEX IF NOT EXISTS ordering_keys_pending ON ordering_keys (tenant_id, ordering_key)
    WHERE pending > 0;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS ordering_key text;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS ordering_seq bigint;
CREATE INDEX IF NOT EXISTS outbox_ordering ON outbox (tenant_id, ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL;
ALTER TABLE dead_letters ADD COLUMN IF NOT EXISTS ordering_key text;
