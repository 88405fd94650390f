-- 0003: a per-tenant counter of signing-key changes. A rotation bumps it in the
-- same transaction that writes the new key, and the dispatcher's claim reads it
-- with each event, so a cached signer of an older version is never used for an
-- event claimed after the rotation committed.
ALTER TABLE tenants ADD COLUMN secret_version integer NOT NULL DEFAULT 1;
