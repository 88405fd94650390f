-- hookrelay: runs beside older releases
-- 0015: idempotency keys found by their task. A purged task takes its key with it
-- (ON DELETE CASCADE), and without an index on task_id every deleted task read the
-- whole of idempotency_keys: measured with 20,000 expired tasks, a batch of 1,000
-- took 1.5 s and the purge 30 s, growing with the square of the backlog. An index
-- older code does not notice; built in the migration's transaction (writes to
-- idempotency_keys wait for the build, as for every index a migration adds).
-- The table this migration locks, locked first (see hookrelay.outbox.store.migrations).
LOCK TABLE idempotency_keys IN SHARE MODE;
CREATE INDEX IF NOT EXISTS idempotency_keys_task ON idempotency_keys (task_id);
