-- hookrelay: runs beside older releases
-- 0018: a task's transition, its event and its outbox row written by one statement
-- (finish_task in queries.sql), so hookrelay's API commits a completion in one
-- round trip instead of four (BEGIN, UPDATE, INSERT, COMMIT). The statement needs
-- no Python between its parts: the event body is built in SQL (webhook_time()
-- writes its timestamps), and the outbox row's destination key, which only Python
-- computes (IDNA, the IPv6 prefixes that carry IPv4), is computed at submit and
-- kept until the task's event is written, in task_hosts (a table of its own: a new
-- column on tasks would change the row type that older releases' prepared
-- "SELECT *" and "RETURNING *" statements return, and fail those of them that run
-- in a transaction once). Older releases insert tasks without a row there and
-- complete tasks as before; this release completes a task without one the older
-- way, in a transaction of several statements. A new table and a new function:
-- compatible.
CREATE TABLE IF NOT EXISTS task_hosts (
    task_id text PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    host    text NOT NULL
);

-- A timestamp as the API writes one (msgspec, Python's datetime.isoformat): UTC,
-- a Z, and the microseconds only when there are some.
CREATE OR REPLACE FUNCTION webhook_time(at timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN extract(microseconds FROM at)::bigint % 1000000 = 0 THEN ''
                ELSE to_char(at AT TIME ZONE 'UTC', '.US') END
        || 'Z'
$$;
