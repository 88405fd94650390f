-- 0009: test events (POST /v1/test-events) travel the normal outbox but belong
-- to no task, so their rows carry no task id.
ALTER TABLE outbox ALTER COLUMN task_id DROP NOT NULL;
ALTER TABLE delivery_attempts ALTER COLUMN task_id DROP NOT NULL;
ALTER TABLE dead_letters ALTER COLUMN task_id DROP NOT NULL;
