-- 0005: the operations console's audit trail: every replay (one or bulk) and
-- every manual circuit close, with who, when, how many, the filter and the reason.
CREATE TABLE IF NOT EXISTS ops_audit (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL,
    action      text NOT NULL CHECK (action IN ('replay', 'bulk_replay', 'close_circuit')),
    count       integer NOT NULL,
    filter      jsonb NOT NULL DEFAULT '{}',
    reason      text NOT NULL
);
CREATE INDEX IF NOT EXISTS ops_audit_at ON ops_audit (at DESC, id DESC);
