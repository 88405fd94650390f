"""Dead letters: what the dispatcher gave up on, and the replay that puts it back in the outbox."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from . import queries
from .errors import AlreadyReplayed, DeadLetterNotFound
from .models import Attempt, iso

REPLAY_BATCH = 1000


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    tenant_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    event_type: str | None = None
    event_id: str | None = None

    def args(self) -> tuple[Any, ...]:
        return (self.tenant_id, self.since, self.until, self.event_type, self.event_id)


def to_resource(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "eventId": row["event_id"], "tenantId": row["tenant_id"], "taskId": row["task_id"],
        "eventType": row["event_type"], "callbackUrl": row["callback_url"],
        "createdAt": iso(row["created_at"]), "failedAt": iso(row["failed_at"]),
        "attempts": row["attempts"], "lastError": row["last_error"],
        "lastStatusCode": row["last_status_code"], "replayCount": row["replay_count"],
    }


async def list_dead_letters(
    conn: asyncpg.Connection, flt: DeadLetterFilter, *,
    after: tuple[datetime, str] | None = None, limit: int = 100,
) -> tuple[list[asyncpg.Record], tuple[datetime, str] | None]:
    """A page of unreplayed letters in (failed_at, event_id) order, and the next cursor."""
    rows = await conn.fetch(
        queries.LIST_DEAD_LETTERS, *flt.args(), after[0] if after else None,
        after[1] if after else None, limit + 1,
    )
    page = rows[:limit]
    nxt = (page[-1]["failed_at"], page[-1]["event_id"]) if len(rows) > limit and page else None
    return page, nxt


async def get_dead_letter(
    conn: asyncpg.Connection, event_id: str
) -> tuple[asyncpg.Record, list[Attempt]]:
    """The letter (replayed or not) and the event's whole attempt history."""
    row = await conn.fetchrow(queries.GET_DEAD_LETTER, event_id)
    if row is None:
        raise DeadLetterNotFound(event_id)
    history = [Attempt.from_row(r) for r in await conn.fetch(queries.EVENT_ATTEMPTS, event_id)]
    return row, history


async def replay_batch(
    conn: asyncpg.Connection, flt: DeadLetterFilter, *, by: str, limit: int = REPLAY_BATCH
) -> list[str]:
    """Move up to ``limit`` matching letters back to the outbox; their event ids."""
    async with conn.transaction():
        rows = await conn.fetch(queries.REPLAY_DEAD_LETTERS, *flt.args(), limit, by)
        if rows:
            await conn.execute(queries.NOTIFY, "")
    return [r["event_id"] for r in rows]


async def replay_one(conn: asyncpg.Connection, event_id: str, *, by: str) -> None:
    """Replay one letter; :class:`DeadLetterNotFound` or :class:`AlreadyReplayed` otherwise."""
    if await replay_batch(conn, DeadLetterFilter(event_id=event_id), by=by, limit=1):
        return
    if await conn.fetchrow(queries.GET_DEAD_LETTER, event_id) is None:
        raise DeadLetterNotFound(event_id)
    raise AlreadyReplayed(event_id)
