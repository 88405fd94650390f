"""State changes of a task, and the outbox event a terminal one writes.

Every function takes the caller's connection and runs inside a transaction on
it (a savepoint if the caller already opened one), so the status change, the
outbox row and the NOTIFY commit together with the caller's own work or not at
all.
"""

from __future__ import annotations

import json
from typing import Any, Literal
from urllib.parse import urlsplit

import asyncpg

from . import ids, queries
from .errors import InvalidTransition, TaskNotFound
from .models import Task, iso

TerminalStatus = Literal["succeeded", "failed", "cancelled", "timed_out"]
TERMINAL_STATUSES: tuple[TerminalStatus, ...] = ("succeeded", "failed", "cancelled", "timed_out")


def destination_host(url: str) -> str:
    """``host[:port]`` of a callback URL, the unit of per-destination limits."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    return f"{host}:{parts.port}" if parts.port else host


def event_body(task: Task) -> str:
    """The webhook body, serialised once so every attempt sends the same bytes."""
    payload = {
        "type": f"task.{task.status}",
        "timestamp": iso(task.completed_at),
        "data": task.to_resource(),
    }
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


async def enqueue_event(conn: asyncpg.Connection, task: Task) -> None:
    """Write the outbox row for ``task``'s terminal event and wake dispatchers."""
    assert task.event_id is not None
    await conn.execute(
        queries.INSERT_OUTBOX,
        task.event_id,
        task.tenant_id,
        task.id,
        f"task.{task.status}",
        task.callback_url,
        destination_host(task.callback_url),
        event_body(task),
    )


async def _transition(
    conn: asyncpg.Connection,
    task_id: str,
    status: str,
    allowed_from: list[str],
    *,
    result: Any = None,
    error: Any = None,
    tenant_id: str | None = None,
) -> Task:
    terminal = status in TERMINAL_STATUSES
    new_event = ids.event_id() if terminal else None
    async with conn.transaction():
        row = await conn.fetchrow(
            queries.TRANSITION_TASK, task_id, status, result, error, new_event,
            allowed_from, tenant_id,
        )
        if row is None:
            current = await conn.fetchrow(queries.GET_TASK, task_id, tenant_id)
            if current is None:
                raise TaskNotFound(task_id)
            raise InvalidTransition(task_id, Task.from_row(current))
        task = Task.from_row(row)
        if terminal:
            await enqueue_event(conn, task)
        await conn.execute(queries.NOTIFY, task.id)
    return task


async def start_task(conn: asyncpg.Connection, task_id: str) -> Task:
    """queued → running."""
    return await _transition(conn, task_id, "running", ["queued"])


async def complete_task(
    conn: asyncpg.Connection,
    task_id: str,
    status: TerminalStatus,
    result: Any = None,
    error: Any = None,
    *,
    tenant_id: str | None = None,
) -> Task:
    """Move a live task to a terminal ``status`` and enqueue its webhook event.

    Raises :class:`TaskNotFound`, or :class:`InvalidTransition` (carrying the
    current task) if it is already terminal; nothing is written then.
    """
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"{status!r} is not a terminal status")
    return await _transition(
        conn, task_id, status, queries.NON_TERMINAL, result=result, error=error,
        tenant_id=tenant_id,
    )


async def cancel_task(
    conn: asyncpg.Connection, task_id: str, *, tenant_id: str | None = None
) -> Task:
    """→ cancelled, with a ``task.cancelled`` event."""
    return await complete_task(conn, task_id, "cancelled", tenant_id=tenant_id)


async def timeout_task(conn: asyncpg.Connection, task_id: str) -> Task:
    """→ timed_out, with a ``task.timed_out`` event."""
    return await complete_task(
        conn, task_id, "timed_out",
        error={"code": "timed_out", "message": "no result before the task's deadline"},
    )
