-- 0013: the change log is numbered off the write path. Under 0012 every task write
-- took its tenant's counter row and sent a NOTIFY at commit, so one tenant's writes
-- committed one at a time and every notifying commit in the cluster queued on the
-- notification lock (submit fell to a fifth of its rate). Now a write only appends
-- to task_change_queue, a table no other writer waits on. A numberer (one at a
-- time, in whichever process asks; see number_task_changes) moves what has
-- committed into task_changes with each tenant's next numbers, in commit order,
-- and sends one NOTIFY for the whole batch.
CREATE TABLE IF NOT EXISTS task_change_queue (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   text NOT NULL,
    task_id     text NOT NULL,
    version     integer NOT NULL,
    state       jsonb NOT NULL
);
-- Every row is deleted within moments of its insert: vacuum it often, or the dead rows
-- of a busy hour make each look at an empty queue read them all.
ALTER TABLE task_change_queue SET (autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);

-- Still at commit (the triggers of 0012 stay DEFERRABLE INITIALLY DEFERRED), so a
-- queued change's id follows commit order, and nothing that rolls back is queued.
CREATE OR REPLACE FUNCTION record_task_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_change_queue (tenant_id, task_id, version, state)
    VALUES (NEW.tenant_id, NEW.id, NEW.version,
            jsonb_build_object('status', NEW.status, 'result', NEW.result,
                               'error', NEW.error, 'progress', NEW.progress,
                               'updatedAt', NEW.updated_at, 'completedAt', NEW.completed_at));
    RETURN NULL;
END
$$;

-- Numbers up to max_rows queued changes and moves them into task_changes; returns
-- each tenant it numbered for, with its new last number and how many it got.
-- Why no gap and no duplicate: numbers are handed out only here, and the advisory
-- lock lets one numberer run at a time. The statement that takes the queue starts
-- after the lock is granted, so under READ COMMITTED it sees every change
-- committed before then; a change committing later stays queued for the next
-- run, which numbers it above everything numbered now. So a reader that has seen
-- change N of a tenant has seen every change below N, and nothing is numbered
-- twice (the rows leave the queue in the transaction that numbers them). Within
-- a batch a tenant's changes are numbered by queue id, the order in which their
-- transactions reached commit (the triggers run then); two versions of one task
-- are in version order, since the later one could only be written after the
-- earlier one committed. A change's changed_at is when it is numbered, so it
-- rises with seq and retention (by changed_at) only ever purges a prefix.
-- The NOTIFY (channel hookrelay_changes) goes out at commit: one line per tenant,
-- "<tenant id> <last number> <task id> ...", task ids split over several lines
-- (and notifications) so that none exceeds PostgreSQL's payload limit.
CREATE OR REPLACE FUNCTION number_task_changes(max_rows integer)
RETURNS TABLE (stream_tenant text, stream_last_seq bigint, numbered integer)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    task text;
    line text;
    payload text := '';
BEGIN
    -- The usual answer to a look with nothing waiting: no lock, no write. Through the
    -- index, which skips the entries of rows already numbered and deleted.
    PERFORM 1 FROM task_change_queue ORDER BY id LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(7240114);
    FOR r IN
        WITH taken AS (
            DELETE FROM task_change_queue q
             WHERE q.id IN (SELECT id FROM task_change_queue ORDER BY id LIMIT max_rows)
            RETURNING q.id, q.tenant_id, q.task_id, q.version, q.state
        ), ranked AS (
            -- A tenant deleted since leaves its queued changes to nobody.
            SELECT t.*, row_number() OVER (PARTITION BY t.tenant_id ORDER BY t.id) AS n,
                   count(*) OVER (PARTITION BY t.tenant_id) AS total
              FROM taken t
             WHERE EXISTS (SELECT 1 FROM tenants WHERE tenants.id = t.tenant_id)
        ), per_tenant AS (
            SELECT ranked.tenant_id, count(*) AS total,
                   array_agg(DISTINCT ranked.task_id) AS task_ids
              FROM ranked GROUP BY ranked.tenant_id
        ), bumped AS (
            INSERT INTO tenant_streams AS s (tenant_id, last_seq)
            SELECT p.tenant_id, p.total FROM per_tenant p
            ON CONFLICT (tenant_id) DO UPDATE SET last_seq = s.last_seq + EXCLUDED.last_seq
            RETURNING s.tenant_id, s.last_seq
        ), logged AS (
            INSERT INTO task_changes (tenant_id, seq, task_id, version, changed_at, state)
            SELECT ranked.tenant_id, b.last_seq - ranked.total + ranked.n, ranked.task_id,
                   ranked.version, clock_timestamp(), ranked.state
              FROM ranked JOIN bumped b ON b.tenant_id = ranked.tenant_id
        )
        SELECT b.tenant_id, b.last_seq, p.task_ids, p.total::integer AS n
          FROM bumped b JOIN per_tenant p ON p.tenant_id = b.tenant_id
    LOOP
        line := r.tenant_id || ' ' || r.last_seq;
        FOREACH task IN ARRAY r.task_ids LOOP
            IF length(payload) + length(line) + length(task) > 7000 THEN
                PERFORM pg_notify('hookrelay_changes', payload || line);
                payload := '';
                line := r.tenant_id || ' ' || r.last_seq;
            END IF;
            line := line || ' ' || task;
        END LOOP;
        payload := payload || line || E'\n';
        stream_tenant := r.tenant_id;
        stream_last_seq := r.last_seq;
        numbered := r.n;
        RETURN NEXT;
    END LOOP;
    IF payload <> '' THEN
        PERFORM pg_notify('hookrelay_changes', rtrim(payload, E'\n'));
    END IF;
END
$$;
