-- The webhook-ids a hookrelay receiver has processed (hookrelay.receiver.postgres).
-- Run it once in the receiver's own database, beside the tables its work writes:
-- recording the id in the same transaction as that work makes a duplicate a no-op.
CREATE TABLE IF NOT EXISTS hookrelay_seen_webhooks (
    webhook_id   text PRIMARY KEY,
    received_at  timestamptz NOT NULL DEFAULT now()
);
-- For purging old ids (purge_before). Keep them longer than a partner may still
-- redeliver an event (POST /v1/tasks/{id}/redeliver has no deadline): an id purged
-- and then redelivered is processed again.
CREATE INDEX IF NOT EXISTS hookrelay_seen_webhooks_received_at
    ON hookrelay_seen_webhooks (received_at);
