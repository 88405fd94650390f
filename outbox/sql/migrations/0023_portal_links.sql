-- hookrelay: runs beside older releases
-- 0023: the partner portal (/portal). A portal link is a single-use URL a tenant (or
-- an operator for it) asks for; only the SHA-256 of its token is kept. Opening it
-- stamps opened_at (a second opening finds it stamped and is refused). api_key_hash
-- is the tenant's key when the link was made: a rotation in between makes it
-- unopenable, as it ends the sessions already open. The tenant's deletion takes its
-- links along. The audit trail gains the actions a partner takes in the portal
-- (a wider CHECK: older releases write only the actions they already had).
-- Every table this migration locks, locked first (see hookrelay.outbox.store.migrations).
LOCK TABLE ops_audit IN ACCESS EXCLUSIVE MODE;
LOCK TABLE tenants IN SHARE ROW EXCLUSIVE MODE;
CREATE TABLE IF NOT EXISTS portal_links (
    token_hash    bytea PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    api_key_hash  bytea NOT NULL,
    read_only     boolean NOT NULL DEFAULT false,
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    opened_at     timestamptz
);
CREATE INDEX IF NOT EXISTS portal_links_expiry ON portal_links (expires_at);
CREATE INDEX IF NOT EXISTS portal_links_tenant ON portal_links (tenant_id);

ALTER TABLE ops_audit DROP CONSTRAINT IF EXISTS ops_audit_action_check;
ALTER TABLE ops_audit ADD CONSTRAINT ops_audit_action_check CHECK (action IN (
    'replay', 'bulk_replay', 'close_circuit', 'redeliver', 'set_notifications',
    'delete_notifications', 'test_notification', 'rotate_secret', 'test_event'));
