-- 0011: a claim rewrites the outbox row in place. A claim sets only the lease
-- (leased_until, lease_token, lease_owner); with leased_until out of every index
-- and room left in each page, that UPDATE is HOT: the new row version goes in
-- the same page and no index gets a new entry. The lanes index orders a lane
-- by next_attempt_at alone; the claim skips leased rows, of which a lane holds
-- at most what the dispatchers have in flight or waiting ahead on it.
-- Fillfactor 40: a row is rewritten once, by its claim, before it is deleted,
-- and the lease makes it longer, so each page keeps room for a longer second
-- version of every row (at 50 about one claimed row in ten still left its page;
-- bench/hotrow.py). The outbox holds only live work, so the larger heap stays
-- small; existing pages take the setting as they are rewritten.
DROP INDEX IF EXISTS outbox_lane_due;
CREATE INDEX outbox_lane_due ON outbox (host, tenant_id, next_attempt_at);
ALTER TABLE outbox SET (fillfactor = 40);
