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
- :mod:`.group_commit`   the API's concurrent writes coalesced, one statement per batch

A terminal change writes the task and its outbox row in one transaction; delivering
that row is :mod:`hookrelay.outbox.dispatch`'s job, not this package's.

May import (pyproject.toml's layers) ops, keys, egress, the store, destinations and
the shared errors, ids, metrics and models; never dispatch or tenants, its neighbours,
nor sync. It uses :mod:`hookrelay.outbox.ops` (requeue, retention), the store and
destinations.

Its surface, ``__all__``, is what the service imports (never its modules).
"""

from hookrelay.outbox.tasks.group_commit import GroupCommit
from hookrelay.outbox.tasks.progress import check_progress, report_progress
from hookrelay.outbox.tasks.redelivery import attempts, redeliver
from hookrelay.outbox.tasks.submit import (
    Cursor,
    Idempotency,
    NewTask,
    create_task,
    get_task,
    list_tasks,
)
from hookrelay.outbox.tasks.test_events import PING, get_test_event, send_test_event
from hookrelay.outbox.tasks.timeouts import Retention, sweeping
from hookrelay.outbox.tasks.transitions import cancel_task, complete_task, start_task, timeout_task

__all__ = [
    "PING",
    "Cursor",
    "GroupCommit",
    "Idempotency",
    "NewTask",
    "Retention",
    "attempts",
    "cancel_task",
    "check_progress",
    "complete_task",
    "create_task",
    "get_task",
    "get_test_event",
    "list_tasks",
    "redeliver",
    "report_progress",
    "send_test_event",
    "start_task",
    "sweeping",
    "timeout_task",
]
