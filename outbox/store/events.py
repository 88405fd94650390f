"""Outbox rows, the NOTIFY that wakes dispatchers and watchers, and the attempt log."""

from __future__ import annotations

import asyncpg

from .._queries import sql
from ..models import Attempt, EventId, TaskId

OUTBOX_CHANNEL = "hookrelay_outbox"
TASKS_CHANNEL = "hookrelay_tasks"

_INSERT_OUTBOX = sql("insert_outbox")
_NOTIFY = sql("notify")
_REQUEUE_EVENT = sql("requeue_event")
_MARK_REPLAYED = sql("mark_replayed")
_ATTEMPTS = sql("attempts")


async def insert_outbox(
    conn: asyncpg.Connection, *, event_id: EventId, tenant_id: str, task_id: TaskId,
    event_type: str, callback_url: str, host: str, body: str,
) -> None:
    """A new event, due now."""
    await conn.execute(_INSERT_OUTBOX, event_id, tenant_id, task_id, event_type, callback_url,
                       host, body)


async def notify(conn: asyncpg.Connection, *, task_id: str = "") -> None:
    """Wake dispatchers, and the watchers of ``task_id``, when the transaction commits."""
    await conn.execute(_NOTIFY, task_id, OUTBOX_CHANNEL, TASKS_CHANNEL)


async def requeue_event(
    conn: asyncpg.Connection, *, event_id: EventId, tenant_id: str, task_id: TaskId,
    event_type: str, callback_url: str, host: str, body: str,
) -> bool:
    """Put the event back in the outbox with a fresh budget, its attempt numbering
    carrying on; False (nothing written) if it is still waiting there."""
    row_id = await conn.fetchval(_REQUEUE_EVENT, event_id, tenant_id, task_id, event_type,
                                 callback_url, host, body)
    return row_id is not None


async def mark_replayed(conn: asyncpg.Connection, *, event_id: EventId, by: str) -> None:
    """Close the event's dead letter, if it has an open one."""
    await conn.execute(_MARK_REPLAYED, event_id, by)


async def attempts(
    conn: asyncpg.Connection, *, task_id: TaskId | str, event_id: EventId | None = None
) -> list[Attempt]:
    """The task's delivery log, oldest first; only ``event_id``'s attempts if given."""
    return [Attempt.from_row(r) for r in await conn.fetch(_ATTEMPTS, task_id, event_id)]
