"""The typed store: the only code that runs SQL.

Every statement of ``outbox/sql/queries.sql`` has one function here, taking an
asyncpg connection first and keyword-only arguments, and returning frozen
dataclasses (never an ``asyncpg.Record``). A shifted ``$n`` argument is a
type error at the call, not a silent wrong write. The statements an executor's
own transaction runs are offered as steps instead (``*_step``), which the
drivers run on asyncpg, psycopg 3 or SQLAlchemy. One module per area:

- :mod:`.signals`      every NOTIFY between processes: channel, payload, version
- :mod:`.changes`      the change log the status streams read
- :mod:`.tasks`        tasks, their transitions, idempotency keys, the sweeper's claim
- :mod:`.events`       outbox rows, NOTIFY, requeueing an event, the attempt log
- :mod:`.delivery`     the dispatcher's claim, lease release and outcome batches
- :mod:`.destinations` per-host circuit state
- :mod:`.deadletters`  dead letters: listing, lookup, replay
- :mod:`.tenants`      tenants and signing secrets
- :mod:`.notifications` tenants' notification settings and their last notifications
- :mod:`.masterkey`    the master key check, re-encryption of every secret
- :mod:`.console`      what the ops console reads beyond the other areas, its audit trail
- :mod:`.portal`       the partner portal's links and session check, a tenant's figures
- :mod:`.metrics`      gauges read at scrape time, the readiness ping
- :mod:`.retention`    purges past retention
- :mod:`.steps`        statements as values, and the plans written over them
- :mod:`.drivers`      runs a plan on the caller's connection (asyncpg, psycopg 3, SQLAlchemy)

and the connections and the schema: :mod:`.pool` (a pool that waits for the database),
:mod:`.listener` (a LISTEN connection that comes back), :mod:`.poolers` (telling a
connection pooler is in between), :mod:`.migrations` with
:mod:`.migration_steps` (numbered migrations) and :mod:`.schema` (their lock and record).

May import (pyproject.toml's layers) :mod:`hookrelay.outbox.sql` (nothing else does),
:mod:`hookrelay.outbox.destinations` (the host-key migration) and the shared errors,
ids, metrics and models; nothing above it.

The service's surface: the pool, the listener, the migrations and the channels by the
names below, and the areas it reads as they are (:mod:`.changes` for the status
streams, :mod:`.console`, :mod:`.destinations`, :mod:`.events` for its NOTIFY,
:mod:`.metrics`); pyproject.toml's contract lists those five. Inside the outbox,
modules import each other's modules directly.
"""

from hookrelay.outbox.store import (
    changes,
    console,
    deadletters,
    delivery,
    destinations,
    events,
    metrics,
    portal,
    retention,
    schema,
    tasks,
    tenants,
)
from hookrelay.outbox.store.changes import CHANGES_CHANNEL
from hookrelay.outbox.store.events import OUTBOX_CHANNEL, TASKS_CHANNEL
from hookrelay.outbox.store.listener import Listener
from hookrelay.outbox.store.migrations import check_schema, migrate, migration_status
from hookrelay.outbox.store.pool import TRANSIENT_ERRORS, create_pool, dsn_through_pooler
from hookrelay.outbox.store.signals import parse_changes
from hookrelay.outbox.store.tenants import KEYS_CHANNEL

__all__ = [
    "CHANGES_CHANNEL",
    "KEYS_CHANNEL",
    "OUTBOX_CHANNEL",
    "TASKS_CHANNEL",
    "TRANSIENT_ERRORS",
    "Listener",
    "changes",
    "console",
    "create_pool",
    "dsn_through_pooler",
    "deadletters",
    "delivery",
    "destinations",
    "events",
    "metrics",
    "check_schema",
    "migrate",
    "migration_status",
    "parse_changes",
    "portal",
    "retention",
    "schema",
    "tasks",
    "tenants",
]
