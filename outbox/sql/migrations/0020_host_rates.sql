-- hookrelay: runs beside older releases
-- 0020: HOOKRELAY_PER_HOST_RATE, enforced across every dispatcher of the
-- database. One token bucket per destination host: `tokens` as of
-- `refilled_at`, refilled at the configured rate up to the bucket's size when
-- a dispatcher takes from it (take_host_tokens), `granted` what that last take
-- gave. Rows appear only for hosts claimed while a rate is set, so without
-- one the table stays empty and no statement reads it. A new table older
-- releases do not know: they ignore the rate, as they did.
CREATE TABLE IF NOT EXISTS host_rates (
    host         text PRIMARY KEY,
    tokens       double precision NOT NULL,
    granted      integer NOT NULL DEFAULT 0,
    refilled_at  timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50);
