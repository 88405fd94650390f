-- hookrelay: runs beside older releases
-- 0022: the W3C trace context a task's submitter sent (traceparent, tracestate), kept
-- for every attempt of its webhook, which sends a traceparent of that trace with the
-- attempt's own span id. A table of its own, not columns of tasks: a release running
-- beside this one caches the plans of its `SELECT *` and `RETURNING *` on tasks, and
-- a new column would make them fail inside a transaction ("cached plan must not
-- change result type"). Only tasks submitted with a trace context have a row; older
-- code neither reads nor writes it, and a task's deletion takes its row along.
-- The table this migration locks, locked first (see hookrelay.outbox.store.migrations).
LOCK TABLE tasks IN SHARE ROW EXCLUSIVE MODE;
CREATE TABLE IF NOT EXISTS task_traces (
    task_id     text PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    traceparent text NOT NULL,
    tracestate  text
);
