"""Sending a task's terminal event again, under the same event id, and reading its attempt log."""

from __future__ import annotations

import asyncpg

from hookrelay.outbox.errors import AlreadyPending, NotTerminal, TaskNotFound
from hookrelay.outbox.models import Attempt, Task
from hookrelay.outbox.ops.requeue import OutboxEvent, put_back
from hookrelay.outbox.store import events, tasks
from hookrelay.outbox.tasks.transitions import destination_host, event_body

__all__ = ["AlreadyPending", "attempts", "redeliver"]


async def redeliver(
    conn: asyncpg.Connection, task_id: str, *, tenant_id: str | None, by: str
) -> Task:
    """Queue the terminal event of ``task_id`` again (same event id, fresh budget).

    Raises :class:`TaskNotFound`, :class:`NotTerminal` if the task is not
    terminal yet, or :class:`AlreadyPending` if its event is still queued.
    """
    async with conn.transaction():
        task = await tasks.lock_task(conn, task_id=task_id, tenant_id=tenant_id)
        if task is None:
            raise TaskNotFound(task_id)
        if not task.terminal or task.event_id is None:
            raise NotTerminal(task_id, task)
        # The body stored at commit. An event delivered before bodies were kept
        # has none: build it as its commit would now; requeueing stores it, so
        # every later redelivery sends these same bytes.
        body = await events.event_body(conn, event_id=task.event_id)
        event = OutboxEvent(
            event_id=task.event_id,
            tenant_id=task.tenant_id,
            task_id=task.id,
            event_type=f"task.{task.status}",
            callback_url=task.callback_url,
            host=destination_host(task.callback_url),
            body=body if body is not None else event_body(task),
        )
        if not await put_back(conn, [event], by=by, task_id=task.id):
            raise AlreadyPending(task_id, task)
        updated = await tasks.get_task(conn, task_id=task.id)
    assert updated is not None  # locked above, so still there
    return updated


async def attempts(conn: asyncpg.Connection, task_id: str) -> list[Attempt]:
    """Every delivery attempt of the task, oldest first."""
    return await events.attempts(conn, task_id=task_id)
