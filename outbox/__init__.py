"""hookrelay's delivery core: transactional outbox writes, dispatcher, signing, retries.

The functions re-exported here take the caller's asyncpg connection, so an
executor can finish a task inside its own transaction::

    async with conn.transaction():
        await save_result(conn, ...)
        await outbox.complete_task(conn, task_id, "succeeded", result=...)
"""

from .errors import OutboxError
from .progress import report_progress
from .transitions import cancel_task, complete_task, start_task, timeout_task

__all__ = [
    "OutboxError",
    "cancel_task",
    "complete_task",
    "report_progress",
    "start_task",
    "timeout_task",
]
