-- 0010: the immutable part of each event in its own table, written once at
-- commit, so the outbox row that every claim rewrites stays small.
CREATE TABLE events (
    event_id    text PRIMARY KEY,
    tenant_id   text NOT NULL,
    -- NULL for an event that belongs to no task.
    task_id     text,
    event_type  text NOT NULL,
    body        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Every stored body, exactly as it is: waiting events first, then dead letters.
INSERT INTO events (event_id, tenant_id, task_id, event_type, body, created_at)
SELECT event_id, tenant_id, task_id, event_type, body, created_at FROM outbox
ON CONFLICT (event_id) DO NOTHING;
INSERT INTO events (event_id, tenant_id, task_id, event_type, body, created_at)
SELECT event_id, tenant_id, task_id, event_type, body, created_at FROM dead_letters
ON CONFLICT (event_id) DO NOTHING;

ALTER TABLE outbox DROP COLUMN body;
