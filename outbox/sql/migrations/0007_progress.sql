-- 0007: progress reports and executor heartbeats. A running task whose executor
-- stops reporting for heartbeat_timeout_s is timed out by the sweeper, with the
-- on_timeout default written onto it.
ALTER TABLE tasks
    ADD COLUMN progress            jsonb,
    ADD COLUMN heartbeat_timeout_s double precision,
    ADD COLUMN heartbeat_at        timestamptz,
    ADD COLUMN heartbeat_due_at    timestamptz,
    ADD COLUMN on_timeout          jsonb;
CREATE INDEX IF NOT EXISTS tasks_heartbeat_due ON tasks (heartbeat_due_at)
    WHERE heartbeat_due_at IS NOT NULL AND status = 'running';
-- Running tasks that were started before this migration count from now.
UPDATE tasks SET heartbeat_at = now() WHERE status = 'running';
CREATE INDEX IF NOT EXISTS tasks_running ON tasks (heartbeat_at) WHERE status = 'running';
