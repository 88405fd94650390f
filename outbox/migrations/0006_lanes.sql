-- 0006: lanes. A lane is one tenant's events to one host; the dispatcher's
-- scheduler (outbox/dispatch/scheduler.py) hands out free slots lane by lane. The index
-- keeps each lane's rows together in due order, so finding the lanes with due
-- work is two index probes per lane (a skip scan), and a lane's claim reads
-- only the rows it takes, however many rows wait elsewhere. It replaces the
-- global due index, which every claim had to filter through.
DROP INDEX IF EXISTS outbox_due;
CREATE INDEX outbox_lane_due ON outbox (host, tenant_id, (GREATEST(next_attempt_at, leased_until)));
-- Where a host's rows wait while its circuit is not closed: moved out of the
-- due range once, to this time, and put back in one statement when the host
-- answers again (store.delivery.record_outcomes).
ALTER TABLE destinations ADD COLUMN held_until timestamptz;
