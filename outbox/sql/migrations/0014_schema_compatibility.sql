-- hookrelay: runs beside older releases
-- 0014: which applied migrations a process of an earlier release may run beside.
-- A process refuses a database that holds a migration it does not know, naming it,
-- unless that migration was declared compatible: the first line of its file says
-- "-- hookrelay: runs beside older releases" (an additive change older code does
-- not notice: a new table, a nullable or defaulted column, a new index). The flag
-- is recorded here when the migration is applied, because an older process has
-- only the database to read it from.
-- This one is compatible itself: older code inserts (version, name) only.
-- Side by side: 0.2.0, the release that brings it, and 0.1.0 (commit a62dbb1, whose
-- newest migration is 0013) run together on a database that has it, upgrading and
-- rolling back; both send and understand the same signals (outbox/store/signals.py).
-- `python -m bench upgrade --rollback` runs the two under load.
-- The table this migration locks, locked first (see hookrelay.outbox.store.migrations).
LOCK TABLE schema_version IN ACCESS EXCLUSIVE MODE;
ALTER TABLE schema_version ADD COLUMN IF NOT EXISTS compatible boolean NOT NULL DEFAULT false;
