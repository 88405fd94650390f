-- 0004: one host key per destination (hookrelay.outbox.destinations). SQL cannot do IDNA or
-- unwrap embedded IPv4 addresses, so the rows are rewritten by the Python step
-- registered for this migration in outbox/store/migration_steps.py, in this transaction and
-- under the same advisory lock. No table changes.
SELECT 1;
