-- 0012: the change log the status streams (SSE, WebSocket) read and resume from.
-- The change log behind the status streams (0012): one row per new version of a
-- task, numbered per tenant, in commit order. Written by a deferred trigger on
-- tasks, so it records every writer (API, sweeper, console, an executor's own
-- transaction through any driver) and nothing that rolls back. state holds only
-- what a change can alter; the immutable fields are read from tasks.
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

-- Each tenant's last change number. Its row lock orders a tenant's changes: the
-- trigger takes it at commit, so it is held for the commit alone, and a reader
-- that sees change N has seen every change before it.
CREATE TABLE IF NOT EXISTS tenant_streams (
    tenant_id  text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    last_seq   bigint NOT NULL
);

-- Runs at commit (DEFERRABLE INITIALLY DEFERRED), once per new version, with the
-- row as that version left it: two changes in one transaction are two entries.
-- The NOTIFY (channel hookrelay_changes, payload "<tenant id> <seq>") is sent
-- only if the transaction commits.
CREATE OR REPLACE FUNCTION record_task_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    next_seq bigint;
BEGIN
    INSERT INTO tenant_streams AS s (tenant_id, last_seq) VALUES (NEW.tenant_id, 1)
    ON CONFLICT (tenant_id) DO UPDATE SET last_seq = s.last_seq + 1
    RETURNING s.last_seq INTO next_seq;
    INSERT INTO task_changes (tenant_id, seq, task_id, version, state)
    VALUES (NEW.tenant_id, next_seq, NEW.id, NEW.version,
            jsonb_build_object('status', NEW.status, 'result', NEW.result,
                               'error', NEW.error, 'progress', NEW.progress,
                               'updatedAt', NEW.updated_at, 'completedAt', NEW.completed_at));
    PERFORM pg_notify('hookrelay_changes', NEW.tenant_id || ' ' || next_seq);
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
