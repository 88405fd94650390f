"""hookrelay's delivery core: transactional outbox writes, dispatcher, signing, retries.

The functions re-exported here take the caller's connection (asyncpg, a psycopg 3
``AsyncConnection``, a SQLAlchemy 2 ``AsyncConnection`` or ``AsyncSession``), so an
executor can finish a task inside its own transaction::

    async with conn.transaction():
        await save_result(conn, ...)
        await outbox.complete_task(conn, task_id, "succeeded", result=...)

``hookrelay.outbox.sync`` has the same functions for sync psycopg and SQLAlchemy code.

Inside, imports go one way, each line below building on the next (pyproject.toml's
contracts; the package map in CONTRIBUTING.md)::

    sync
    tasks | dispatch | tenants | portal
    ops | keys | egress
    store
    sql | destinations
    errors | ids | metrics | models | tracing
"""

from hookrelay.outbox import sync
from hookrelay.outbox.errors import OutboxError
from hookrelay.outbox.tasks.progress import report_progress
from hookrelay.outbox.tasks.transitions import cancel_task, complete_task, start_task, timeout_task

__all__ = [
    "OutboxError",
    "cancel_task",
    "complete_task",
    "report_progress",
    "start_task",
    "sync",
    "timeout_task",
]
