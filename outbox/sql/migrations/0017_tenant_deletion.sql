-- hookrelay: runs beside older releases
-- 0017: a deleted tenant takes its undelivered work with it. No route deletes a
-- tenant; an operator deletes its row, and its tasks, keys, secrets and stream
-- counter went with it (ON DELETE CASCADE), but its waiting outbox rows, stored
-- events, dead letters and logged changes stayed: the dispatcher kept claiming
-- them, and a claim round that took one failed (no signing key), holding back
-- other tenants' events claimed with it, for ever. Those tables have no foreign
-- key to tenants (it would cost every event a lookup and a lock on its tenant's
-- row), so a trigger does it, at deletion only. An event in flight then has no
-- row for its outcome (fenced away, counted stale) and is never sent again. Its
-- attempt log goes by retention. Older releases delete no tenant, and an outcome
-- whose row is gone is already refused by the lease fence: compatible.
-- Every table this migration locks, locked first (see hookrelay.outbox.store.migrations).
LOCK TABLE tenants IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE outbox, dead_letters, events, task_changes IN ROW EXCLUSIVE MODE;
CREATE OR REPLACE FUNCTION forget_tenant() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM outbox WHERE tenant_id = OLD.id;
    DELETE FROM dead_letters WHERE tenant_id = OLD.id;
    DELETE FROM events WHERE tenant_id = OLD.id;
    DELETE FROM task_changes WHERE tenant_id = OLD.id;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS tenants_forgotten ON tenants;
CREATE TRIGGER tenants_forgotten AFTER DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION forget_tenant();

-- What tenants deleted before this migration left behind.
DELETE FROM outbox o WHERE NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = o.tenant_id);
DELETE FROM dead_letters d WHERE NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = d.tenant_id);
DELETE FROM events e WHERE NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = e.tenant_id);
DELETE FROM task_changes c WHERE NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = c.tenant_id);
