-- hookrelay: runs beside older releases
-- 0019: callback headers. A task may carry headers that every attempt of its
-- webhook sends (a receiver's static x-api-key). Their values are sealed like
-- signing secrets (AES-GCM under the master key, the task id as associated
-- data); their names, which the task resource shows, are kept in the clear. In
-- a table of their own, one row per task that has any, going with its task:
-- columns added to tasks would change what older releases' cached `SELECT *` and
-- `RETURNING *` statements return, which fails such a statement once inside a
-- transaction. A new table older code never reads: an older dispatcher still
-- running during an upgrade sends the task's webhook without them.
-- The table this migration locks, locked first (see hookrelay.outbox.store.migrations).
LOCK TABLE tasks IN SHARE ROW EXCLUSIVE MODE;
CREATE TABLE IF NOT EXISTS callback_headers (
    task_id  text PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    names    text[] NOT NULL,
    sealed   bytea NOT NULL
);
