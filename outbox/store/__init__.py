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
- :mod:`.metrics`      gauges read at scrape time
- :mod:`.retention`    purges past retention
- :mod:`.schema`       the lock that serialises schema changes
- :mod:`.steps`        statements as values, and the plans written over them
- :mod:`.drivers`      runs a plan on the caller's connection; asyncpg's driver
- :mod:`.via_psycopg`, :mod:`.via_sqlalchemy`  the drivers for those libraries (optional
  extras); :mod:`.via_sqlalchemy_async` the async SQLAlchemy one (it needs greenlet)
"""

from hookrelay.outbox.store import (
    changes,
    deadletters,
    delivery,
    destinations,
    events,
    metrics,
    retention,
    schema,
    signals,
    tasks,
    tenants,
)
from hookrelay.outbox.store.changes import CHANGES_CHANNEL
from hookrelay.outbox.store.events import OUTBOX_CHANNEL, TASKS_CHANNEL
from hookrelay.outbox.store.tenants import KEYS_CHANNEL

__all__ = [
    "CHANGES_CHANNEL",
    "KEYS_CHANNEL",
    "OUTBOX_CHANNEL",
    "TASKS_CHANNEL",
    "changes",
    "deadletters",
    "delivery",
    "destinations",
    "events",
    "metrics",
    "retention",
    "schema",
    "signals",
    "tasks",
    "tenants",
]
