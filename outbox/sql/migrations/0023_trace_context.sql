-- hookrelay: runs beside older releases
-- 0023: the W3C trace context a task's submitter sent (traceparent, tracestate; a
-- new trace when none came), kept on the task: every attempt of its webhook sends a
-- traceparent of that trace with the attempt's own span id. Nullable columns older
-- code neither reads nor writes: the tasks it submits have none, and their webhooks
-- go without a traceparent, as before.
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS traceparent text;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS tracestate text;
