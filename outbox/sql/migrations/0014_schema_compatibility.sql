-- hookrelay: runs beside older releases
-- 0014: which applied migrations a process of an earlier release may run beside.
-- A process refuses a database that holds a migration it does not know, naming it,
-- unless that migration was declared compatible: the first line of its file says
-- "-- hookrelay: runs beside older releases" (an additive change older code does
-- not notice: a new table, a nullable or defaulted column, a new index). The flag
-- is recorded here when the migration is applied, because an older process has
-- only the database to read it from.
-- This one is compatible itself: older code inserts (version, name) only.
ALTER TABLE schema_version ADD COLUMN IF NOT EXISTS compatible boolean NOT NULL DEFAULT false;
