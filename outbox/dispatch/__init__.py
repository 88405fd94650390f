"""Delivering outbox rows: claim what is due under a lease, sign, send, record the outcomes.

- :mod:`.dispatcher`   the loop: wakes on NOTIFY (and polls), claims, delivers, records
- :mod:`.scheduler`    who gets the free slots: fair between tenants, then between hosts
- :mod:`.claim_ahead`  a busy lane's next rows, leased before its slots free
- :mod:`.attempt`      one attempt: sign, POST under one deadline, read, classify
- :mod:`.outcomes`     the outcomes of a batch written in one transaction
- :mod:`.retry`        the retry policy as data (the schedule is stored on the row)
- :mod:`.circuit`      the per-host circuit breaker and its probes

May import (pyproject.toml's layers) ops, keys, egress, the store, destinations and the
shared errors, ids, metrics and models; never tasks or tenants, its neighbours: the
rows it delivers were written by them, and are all it knows of them. It uses
:mod:`hookrelay.outbox.keys` (signing keys, signatures), :mod:`hookrelay.outbox.egress`
(sending) and the store.

Its surface, ``__all__``, is what the service imports (never its modules).
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
