"""Delivering outbox rows: claim what is due under a lease, sign, send, record the outcomes.

- :mod:`.dispatcher`   the loop: wakes on NOTIFY (and polls), claims, delivers, records
- :mod:`.scheduler`    who gets the free slots: fair between tenants, then between hosts
- :mod:`.claim_ahead`  a busy lane's next rows, leased before its slots free
- :mod:`.attempt`      one attempt: sign, POST under one deadline, read, classify
- :mod:`.outcomes`     the outcomes of a batch written in one transaction
- :mod:`.retry`        the retry policy as data (the schedule is stored on the row)
- :mod:`.circuit`      the per-host circuit breaker and its probes

May import: :mod:`hookrelay.outbox.keys` (the signing keys and signatures),
:mod:`hookrelay.outbox.egress` (sending), the store and errors, ids, metrics, models.
Never tasks, ops or tenants: the rows it delivers were written by them, and are all
it knows of them.

The names below are the package's surface: what the service (and any caller outside
the outbox) imports, from here and not from the modules. Inside the outbox, modules
import each other's modules directly.
"""

from hookrelay.outbox.dispatch.attempt import AttemptLimits
from hookrelay.outbox.dispatch.circuit import BreakerPolicy
from hookrelay.outbox.dispatch.dispatcher import Dispatcher, DispatcherConfig, running
from hookrelay.outbox.dispatch.retry import RetryPolicy

__all__ = [
    "AttemptLimits",
    "BreakerPolicy",
    "Dispatcher",
    "DispatcherConfig",
    "RetryPolicy",
    "running",
]
