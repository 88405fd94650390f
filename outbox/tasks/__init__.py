"""A task's life: submitted, started, reporting progress, finished or cancelled, timed out,
its event sent again.

- :mod:`.submit`         new tasks (idempotency keys), lookup, the reconciliation listing
- :mod:`.state_changes`  each state change written once, as a plan over the store's steps
- :mod:`.transitions`    those plans on the caller's async connection (start, complete,
  cancel, time out); :mod:`hookrelay.outbox.sync` runs them on sync ones
- :mod:`.progress`       progress reports, the executor's heartbeat
- :mod:`.timeouts`       the sweeper: deadlines and silent executors, the retention purge
- :mod:`.redelivery`     a terminal event sent again under its id, and the attempt log
- :mod:`.test_events`    a signed ``ping`` to a URL, through the normal outbox

A terminal change writes the task and its outbox row in one transaction; delivering
that row is :mod:`hookrelay.outbox.dispatch`'s job, not this package's.

May import: :mod:`hookrelay.outbox.ops` (requeue, retention), the store, destinations
and errors, ids, models. Never dispatch, keys, egress or tenants (pyproject.toml's
layers).
"""
