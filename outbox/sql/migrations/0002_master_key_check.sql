-- 0002: which master key this database's signing secrets are encrypted under.
-- One row, written by the first process that opens the database with a key:
-- a short id of the key (never the key) and a known value sealed with it, so a
-- process holding another key is refused at start instead of failing every
-- delivery later.
CREATE TABLE master_key_check (
    id          smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    key_id      text NOT NULL,
    check_enc   bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
