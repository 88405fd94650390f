-- hookrelay: runs beside older releases
-- 0018: a task's transition, its event and its outbox row written by one statement
-- (finish_task in queries.sql), so hookrelay's API commits a completion in one
-- round trip instead of four (BEGIN, UPDATE, INSERT, COMMIT). The statement needs
-- no Python between its parts: the event body is built in SQL (webhook_time()
-- writes its timestamps), and the outbox row's destination key, which only Python
-- computes (IDNA, the IPv6 prefixes that carry IPv4), is computed at submit and
-- kept by the callback URL's origin (url_origin()) in destination_keys: a small
-- table, one row per origin, which a submit to a known origin only looks up. (Not a
-- column of tasks: that would change the row type older releases' prepared
-- "SELECT *" and "RETURNING *" statements return, and fail those of them running in
-- a transaction, once.) A change to host_key's rules must rewrite this table, as
-- the host_keys step rewrote the stored keys. Older releases submit without adding
-- a row and complete tasks as before; this release completes a task whose origin
-- has none the older way, in a transaction of several statements. A new table and
-- new functions: compatible.
CREATE TABLE IF NOT EXISTS destination_keys (
    origin text PRIMARY KEY,
    host   text NOT NULL
);

-- A callback URL up to its path, query or fragment: scheme://[userinfo@]host[:port],
-- as written. hookrelay.outbox.destinations.host_key depends on no more than that.
CREATE OR REPLACE FUNCTION url_origin(url text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substring(url FROM '^[^/?#]*//[^/?#]*')
$$;

-- A timestamp as the API writes one (msgspec, Python's datetime.isoformat): UTC,
-- a Z, and the microseconds only when there are some.
CREATE OR REPLACE FUNCTION webhook_time(at timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN extract(microseconds FROM at)::bigint % 1000000 = 0 THEN ''
                ELSE to_char(at AT TIME ZONE 'UTC', '.US') END
        || 'Z'
$$;
