"""Dead letters: the filtered listing, one letter, and the set-based replay."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from hookrelay.outbox.models import ErrorClass, EventId, TaskId, TenantId
from hookrelay.outbox.sql import sql
from hookrelay.outbox.store.events import OutboxEvent

_LIST_DEAD_LETTERS = sql("list_dead_letters")
_GET_DEAD_LETTER = sql("get_dead_letter")
_PICK_DEAD_LETTERS = sql("pick_dead_letters")
_DEAD_LETTER_CLOCK = sql("dead_letter_clock")


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """Which letters a listing or replay covers; None means any."""

    tenant_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    event_type: str | None = None
    event_id: str | None = None
    status_code: int | None = None
    error_class: ErrorClass | None = None

    def args(self) -> tuple[Any, ...]:
        return (
            self.tenant_id,
            self.since,
            self.until,
            self.event_type,
            self.event_id,
            self.status_code,
            self.error_class,
        )


@dataclass(frozen=True, slots=True)
class DeadLetter:
    event_id: EventId
    tenant_id: TenantId
    task_id: TaskId | None  # None: a test event
    event_type: str
    callback_url: str
    created_at: datetime
    failed_at: datetime
    attempts: int
    last_error: str | None
    last_status_code: int | None
    replay_count: int
    replayed_at: datetime | None
    replayed_by: str | None
    # From the stored status and error, by the same SQL the error-class filter uses.
    error_class: ErrorClass
    # The task's orderingKey: its key's later webhooks were sent without waiting for it.
    ordering_key: str | None = None


async def list_dead_letters(
    conn: asyncpg.Connection,
    *,
    flt: DeadLetterFilter,
    after: tuple[datetime, str] | None = None,
    limit: int,
) -> list[DeadLetter]:
    """Up to ``limit`` unreplayed letters in (failed_at, event_id) order after ``after``."""
    rows = await conn.fetch(
        _LIST_DEAD_LETTERS,
        *flt.args(),
        after[0] if after else None,
        after[1] if after else None,
        limit,
    )
    return [DeadLetter(*r) for r in rows]


async def get_dead_letter(conn: asyncpg.Connection, *, event_id: str) -> DeadLetter | None:
    """The letter, replayed or not."""
    row = await conn.fetchrow(_GET_DEAD_LETTER, event_id)
    return DeadLetter(*row) if row is not None else None


async def pick_dead_letters(
    conn: asyncpg.Connection, *, flt: DeadLetterFilter, limit: int
) -> list[OutboxEvent]:
    """Up to ``limit`` matching letters' events (original body), locked until the
    caller's transaction ends; letters another transaction holds are skipped."""
    rows = await conn.fetch(_PICK_DEAD_LETTERS, *flt.args(), limit)
    return [OutboxEvent(*r) for r in rows]


async def clock(conn: asyncpg.Connection) -> datetime:
    """The database's current time, the cut-off of a bulk replay's snapshot."""
    value: datetime = await conn.fetchval(_DEAD_LETTER_CLOCK)
    return value
