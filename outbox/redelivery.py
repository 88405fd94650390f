"""Sending a task's terminal event again, under the same event id, and reading its attempt log."""

from __future__ import annotations

import asyncpg

from . import queries
from .errors import InvalidTransition, TaskNotFound
from .models import Attempt, Task
from .transitions import destination_host, event_body


class AlreadyPending(InvalidTransition):
    """The event is still waiting in the outbox; it needs no second copy."""


async def redeliver(
    conn: asyncpg.Connection, task_id: str, *, tenant_id: str | None, by: str
) -> Task:
    """Queue the terminal event of ``task_id`` again (same event id, fresh budget).

    Raises :class:`TaskNotFound`, :class:`InvalidTransition` if the task is not
    terminal yet, or :class:`AlreadyPending` if its event is still queued.
    """
    async with conn.transaction():
        row = await conn.fetchrow(queries.LOCK_TASK, task_id, tenant_id)
        if row is None:
            raise TaskNotFound(task_id)
        task = Task.from_row(row)
        if not task.terminal or task.event_id is None:
            raise InvalidTransition(task_id, task)
        queued = await conn.fetchval(
            queries.REQUEUE_EVENT, task.event_id, task.tenant_id, task.id,
            f"task.{task.status}", task.callback_url, destination_host(task.callback_url),
            event_body(task),
        )
        if queued is None:
            raise AlreadyPending(task_id, task)
        await conn.execute(queries.MARK_REPLAYED, task.event_id, by)
        updated = Task.from_row(await conn.fetchrow(queries.DELIVERY_PENDING, task.id))
        await conn.execute(queries.NOTIFY, task.id)
    return updated


async def attempts(conn: asyncpg.Connection, task_id: str) -> list[Attempt]:
    """Every delivery attempt of the task, oldest first."""
    return [Attempt.from_row(r) for r in await conn.fetch(queries.TASK_ATTEMPTS, task_id)]
