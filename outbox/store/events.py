"""Outbox rows, the NOTIFY that wakes dispatchers and watchers, and the attempt log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import get_args

import asyncpg

from hookrelay.outbox.models import Attempt, EventId, TaskId, TestEventStatus
from hookrelay.outbox.sql import sql
from hookrelay.outbox.store import signals
from hookrelay.outbox.store.steps import Step

# Their payloads and who hears them: hookrelay.outbox.store.signals.
OUTBOX_CHANNEL = signals.OUTBOX.channel
TASKS_CHANNEL = signals.TASKS.channel

_INSERT_OUTBOX = sql("insert_outbox")
_NOTIFY = sql("notify")
_REQUEUE_EVENTS = sql("requeue_events")
_ATTEMPTS = sql("attempts")
_EVENT_ATTEMPTS = sql("event_attempts")
_TEST_EVENT_STATE = sql("test_event_state")
_EVENT_BODY = sql("event_body")


def insert_outbox_step(
    *,
    event_id: EventId,
    tenant_id: str,
    task_id: TaskId | None,
    event_type: str,
    callback_url: str,
    host: str,
    body: str,
) -> Step:
    """A new event, due now: stored once in ``events``, queued in ``outbox``;
    ``task_id`` None for a test event, which has no task."""
    return Step(
        _INSERT_OUTBOX, (event_id, tenant_id, task_id, event_type, callback_url, host, body)
    )


async def insert_outbox(
    conn: asyncpg.Connection,
    *,
    event_id: EventId,
    tenant_id: str,
    task_id: TaskId | None,
    event_type: str,
    callback_url: str,
    host: str,
    body: str,
) -> None:
    """As :func:`insert_outbox_step`, on an asyncpg connection."""
    step = insert_outbox_step(
        event_id=event_id,
        tenant_id=tenant_id,
        task_id=task_id,
        event_type=event_type,
        callback_url=callback_url,
        host=host,
        body=body,
    )
    await conn.execute(step.sql, *step.args)


async def event_body(conn: asyncpg.Connection, *, event_id: EventId) -> str | None:
    """The body stored when ``event_id`` was committed, or None if none is stored."""
    body: str | None = await conn.fetchval(_EVENT_BODY, event_id)
    return body


def notify_step(*, task_id: str = "") -> Step:
    """Wake dispatchers, and the watchers of ``task_id``, when the transaction commits."""
    return Step(_NOTIFY, (task_id, OUTBOX_CHANNEL, TASKS_CHANNEL))


async def notify(conn: asyncpg.Connection, *, task_id: str = "") -> None:
    """As :func:`notify_step`, on an asyncpg connection."""
    step = notify_step(task_id=task_id)
    await conn.execute(step.sql, *step.args)


@dataclass(frozen=True, slots=True)
class OutboxEvent:
    """An event as the outbox holds it, before any attempt."""

    event_id: EventId
    tenant_id: str
    task_id: TaskId | None
    event_type: str
    callback_url: str
    host: str
    body: str


async def requeue_events(
    conn: asyncpg.Connection, *, events: Sequence[OutboxEvent], by: str
) -> list[EventId]:
    """Put events back in the outbox (fresh budget, numbering carried on), close their
    dead letters as replayed ``by``, mark their tasks pending; the ids queued (an event
    still waiting in the outbox is skipped)."""
    cols: tuple[list[str | None], ...] = tuple([] for _ in range(7))
    for e in events:
        for col, value in zip(
            cols,
            (e.event_id, e.tenant_id, e.task_id, e.event_type, e.callback_url, e.host, e.body),
            strict=True,
        ):
            col.append(value)
    return [r[0] for r in await conn.fetch(_REQUEUE_EVENTS, *cols, by)]


async def attempts(
    conn: asyncpg.Connection, *, task_id: TaskId | str, event_id: EventId | None = None
) -> list[Attempt]:
    """The task's delivery log, oldest first; only ``event_id``'s attempts if given."""
    return [Attempt.from_row(r) for r in await conn.fetch(_ATTEMPTS, task_id, event_id)]


async def event_attempts(
    conn: asyncpg.Connection, *, event_id: str, tenant_id: str | None = None
) -> list[Attempt]:
    """One event's attempts, oldest first; only if it is ``tenant_id``'s, when given."""
    return [Attempt.from_row(r) for r in await conn.fetch(_EVENT_ATTEMPTS, event_id, tenant_id)]


async def test_event_state(
    conn: asyncpg.Connection, *, event_id: str, tenant_id: str
) -> TestEventStatus | None:
    """Where the tenant's test event is: ``pending`` in the outbox, ``dead`` as an open
    dead letter, ``delivered`` per its log; None if the tenant has no test event by that id."""
    state = await conn.fetchval(_TEST_EVENT_STATE, event_id, tenant_id)
    for known in get_args(TestEventStatus):
        if state == known:
            return known  # type: ignore[no-any-return]
    return None
