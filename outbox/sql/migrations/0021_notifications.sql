-- hookrelay: runs beside older releases
-- 0021: a tenant is told about its own delivery trouble (/v1/notifications). New
-- tables, functions and triggers only. The notifications are events like any other
-- (task_id NULL, as a test event's), written into events and outbox by triggers in
-- the transaction that buries a task's webhook or closes a circuit, so an older
-- release's dispatcher writes them too and delivers them as it delivers a ping.
-- An older release's hold_lanes records no episode (destination_notices): its
-- tenants get no destination.unhealthy, and so no destination.recovered either.
-- Every table this migration locks, locked first (see hookrelay.outbox.store.migrations).
LOCK TABLE tenants, dead_letters, destinations IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE events IN SHARE MODE;

-- Where a tenant is told, and about which events (PUT /v1/notifications). host is
-- the URL's destination key, as outbox.host, so a notification's row is claimed,
-- held and probed like a webhook's.
CREATE TABLE IF NOT EXISTS notification_settings (
    tenant_id   text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    url         text NOT NULL,
    host        text NOT NULL,
    events      text[] NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The tenants told that a host's circuit holds their webhooks, one row per
-- (host, tenant) for the open episode: hold_lanes adds them, the circuit's
-- closing takes them away. Written only while a circuit is open. No foreign key
-- to tenants (hold_lanes would then wait on, and fail with, a tenant being
-- deleted): a deleted tenant's row has no settings left to notify, and goes at
-- the closing like the others.
CREATE TABLE IF NOT EXISTS destination_notices (
    host        text NOT NULL,
    tenant_id   text NOT NULL,
    since       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (host, tenant_id)
);
-- A tenant's last notifications, for the console (a small partial index: events
-- are mostly tasks' webhooks).
CREATE INDEX IF NOT EXISTS events_notifications ON events (tenant_id, created_at DESC)
    WHERE event_type IN ('delivery.dead', 'destination.unhealthy', 'destination.recovered');

-- ISO-8601 in UTC with a Z, as the API writes times.
CREATE OR REPLACE FUNCTION notification_time(ts timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

-- Queue one notification of type kind to the tenant's URL, if it has one and
-- asked for that kind: a stored body {"type", "timestamp", "data"} and its outbox
-- row, under a new event id (evt_ and 26 base32 characters, as hookrelay.outbox.ids).
CREATE OR REPLACE FUNCTION queue_notification(tenant text, kind text, data jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    target notification_settings%ROWTYPE;
    id text;
BEGIN
    SELECT * INTO target FROM notification_settings WHERE tenant_id = tenant;
    IF NOT FOUND OR NOT kind = ANY (target.events) THEN
        RETURN;
    END IF;
    SELECT 'evt_' || string_agg(substr('abcdefghijklmnopqrstuvwxyz234567',
                                       get_byte(r.b, i) % 32 + 1, 1), '' ORDER BY i)
      INTO id
      FROM (SELECT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()) AS b) r,
           generate_series(0, 25) i;
    INSERT INTO events (event_id, tenant_id, task_id, event_type, body)
    VALUES (id, tenant, NULL, kind,
            jsonb_build_object('type', kind, 'timestamp', notification_time(now()),
                               'data', data)::text);
    INSERT INTO outbox (event_id, tenant_id, task_id, event_type, callback_url, host)
    VALUES (id, tenant, NULL, kind, target.url, target.host);
END
$$;

-- delivery.dead: a task's webhook landed in dead letters (first time, or again
-- after a replay). Only a task's: a notification or a test event that dies is
-- dead-lettered and nothing more, so a dead notification URL makes no loop.
CREATE OR REPLACE FUNCTION notify_dead_letter() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM queue_notification(NEW.tenant_id, 'delivery.dead', jsonb_build_object(
        'eventId', NEW.event_id, 'taskId', NEW.task_id, 'callbackUrl', NEW.callback_url,
        'attempts', NEW.attempts, 'lastStatusCode', NEW.last_status_code,
        'lastError', NEW.last_error, 'deadAt', notification_time(NEW.failed_at)));
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS dead_letters_notified ON dead_letters;
CREATE TRIGGER dead_letters_notified AFTER INSERT ON dead_letters
    FOR EACH ROW WHEN (NEW.task_id IS NOT NULL) EXECUTE FUNCTION notify_dead_letter();
DROP TRIGGER IF EXISTS dead_letters_renotified ON dead_letters;
CREATE TRIGGER dead_letters_renotified AFTER UPDATE OF failed_at ON dead_letters
    FOR EACH ROW WHEN (NEW.task_id IS NOT NULL AND NEW.replayed_at IS NULL
                       AND OLD.failed_at IS DISTINCT FROM NEW.failed_at)
    EXECUTE FUNCTION notify_dead_letter();

-- destination.unhealthy: the first time in an episode that a host's circuit holds
-- a tenant's webhooks (hold_lanes inserts the notice), once per (host, tenant).
CREATE OR REPLACE FUNCTION notify_unhealthy() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    d destinations%ROWTYPE;
BEGIN
    SELECT * INTO d FROM destinations WHERE host = NEW.host;
    PERFORM queue_notification(NEW.tenant_id, 'destination.unhealthy', jsonb_build_object(
        'host', NEW.host, 'since', notification_time(COALESCE(d.opened_at, NEW.since)),
        'consecutiveFailures', COALESCE(d.consecutive_failures, 0), 'lastError', d.last_error,
        'heldDeliveries', (SELECT count(*) FROM outbox o
                            WHERE o.host = NEW.host AND o.tenant_id = NEW.tenant_id
                              AND o.task_id IS NOT NULL)));
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS destination_notices_unhealthy ON destination_notices;
CREATE TRIGGER destination_notices_unhealthy AFTER INSERT ON destination_notices
    FOR EACH ROW EXECUTE FUNCTION notify_unhealthy();

-- destination.recovered: the circuit closed (a probe or a delivery answered, or an
-- operator closed it); each tenant told of the episode is told it ended, once.
CREATE OR REPLACE FUNCTION notify_recovered() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    told destination_notices%ROWTYPE;
BEGIN
    FOR told IN DELETE FROM destination_notices WHERE host = NEW.host RETURNING * LOOP
        PERFORM queue_notification(told.tenant_id, 'destination.recovered', jsonb_build_object(
            'host', NEW.host, 'since', notification_time(now()),
            'consecutiveFailures', OLD.consecutive_failures, 'lastError', OLD.last_error,
            'heldDeliveries', (SELECT count(*) FROM outbox o
                                WHERE o.host = NEW.host AND o.tenant_id = told.tenant_id
                                  AND o.task_id IS NOT NULL)));
    END LOOP;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS destinations_recovered ON destinations;
CREATE TRIGGER destinations_recovered AFTER UPDATE OF state ON destinations
    FOR EACH ROW WHEN (OLD.state <> 'closed' AND NEW.state = 'closed')
    EXECUTE FUNCTION notify_recovered();
