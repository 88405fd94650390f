"""Dead letters: what the dispatcher gave up on, and the replay that puts it back in the outbox."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

import asyncpg

from hookrelay.outbox.errors import AlreadyReplayed, DeadLetterNotFound
from hookrelay.outbox.models import Attempt, EventId
from hookrelay.outbox.ops.requeue import put_back
from hookrelay.outbox.store import deadletters as store
from hookrelay.outbox.store import events
from hookrelay.outbox.store.deadletters import DeadLetter, DeadLetterFilter

__all__ = [
    "DeadLetter",
    "DeadLetterFilter",
    "get_dead_letter",
    "list_dead_letters",
    "replay_batch",
    "replay_matching",
    "replay_one",
]

REPLAY_BATCH = 1000


async def list_dead_letters(
    conn: asyncpg.Connection,
    flt: DeadLetterFilter,
    *,
    after: tuple[datetime, str] | None = None,
    limit: int = 100,
) -> tuple[list[DeadLetter], tuple[datetime, str] | None]:
    """A page of unreplayed letters in (failed_at, event_id) order, and the next cursor."""
    rows = await store.list_dead_letters(conn, flt=flt, after=after, limit=limit + 1)
    page = rows[:limit]
    nxt = (page[-1].failed_at, page[-1].event_id) if len(rows) > limit and page else None
    return page, nxt


async def get_dead_letter(
    conn: asyncpg.Connection, event_id: str, *, tenant_id: str | None = None
) -> tuple[DeadLetter, list[Attempt]]:
    """The letter (replayed or not) and the event's whole attempt history; with
    ``tenant_id``, another tenant's letter is not found."""
    letter = await store.get_dead_letter(conn, event_id=event_id)
    if letter is None or (tenant_id is not None and letter.tenant_id != tenant_id):
        raise DeadLetterNotFound(event_id)
    # By event, not task: a test event's letter has no task.
    history = await events.event_attempts(conn, event_id=letter.event_id, tenant_id=tenant_id)
    return letter, history


async def replay_batch(
    conn: asyncpg.Connection, flt: DeadLetterFilter, *, by: str, limit: int = REPLAY_BATCH
) -> list[EventId]:
    """Move up to ``limit`` matching letters back to the outbox; their event ids."""
    async with conn.transaction():
        picked = await store.pick_dead_letters(conn, flt=flt, limit=limit)
        return await put_back(conn, picked, by=by) if picked else []


async def replay_matching(
    conn: asyncpg.Connection,
    flt: DeadLetterFilter,
    *,
    by: str,
    batch: int = REPLAY_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Replay every matching letter that had failed when the call began, each once.

    The set is fixed at the start (``failed_at`` before the database's clock then):
    a replayed letter that dies again while this runs gets a later ``failed_at`` and
    waits for the next call. Returns how many letters this call put back.
    """
    started = await store.clock(conn)
    until = min(flt.until, started) if flt.until is not None else started
    snapshot = replace(flt, until=until)
    total = 0
    while done := await replay_batch(conn, snapshot, by=by, limit=batch):
        total += len(done)
        if progress is not None:
            progress(total)
    return total


async def replay_one(
    conn: asyncpg.Connection, event_id: str, *, by: str, tenant_id: str | None = None
) -> None:
    """Replay one letter; :class:`DeadLetterNotFound` or :class:`AlreadyReplayed` otherwise.
    With ``tenant_id``, only that tenant's letter (another's is not found)."""
    flt = DeadLetterFilter(event_id=event_id, tenant_id=tenant_id)
    if await replay_batch(conn, flt, by=by, limit=1):
        return
    letter = await store.get_dead_letter(conn, event_id=event_id)
    if letter is None or (tenant_id is not None and letter.tenant_id != tenant_id):
        raise DeadLetterNotFound(event_id)
    raise AlreadyReplayed(event_id)
