-- hookrelay: runs beside older releases
-- 0016: how many leases of an outbox row ran out in a row with no outcome written.
-- A claim that takes a row whose lease ran out while still held (lease_token set:
-- never given back, its outcome never recorded) adds one; a recorded outcome sets
-- it back to 0. A row at the dispatcher's limit is dead-lettered instead of being
-- sent again: an outcome that can never be written (or an event that crashes its
-- dispatcher) no longer sends the event round at every lease expiry for ever,
-- unspent. A new defaulted column older code does not read or write (it neither
-- counts nor resets; the count only grows once every dispatcher runs this release).
-- The table this migration locks, locked first (see hookrelay.outbox.store.migrations).
LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS lost_leases integer NOT NULL DEFAULT 0;
