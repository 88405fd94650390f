"""Putting an event back in the outbox: one way, for redelivery and dead-letter replay alike.

The event keeps its id (receivers deduplicate on it) and gets a fresh attempt
budget; its attempt numbers carry on from the log. Its dead letter, if open,
is closed as replayed, its task's delivery summary goes back to pending, and
the dispatchers are woken when the caller's transaction commits.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from hookrelay.outbox.models import EventId
from hookrelay.outbox.store import events
from hookrelay.outbox.store.events import OutboxEvent

__all__ = ["OutboxEvent", "put_back"]


async def put_back(
    conn: asyncpg.Connection, queued: Sequence[OutboxEvent], *, by: str, task_id: str = ""
) -> list[EventId]:
    """Requeue ``queued`` as one statement; the ids put back (those still waiting
    in the outbox are skipped). ``task_id`` also wakes that task's watchers."""
    done = await events.requeue_events(conn, events=queued, by=by)
    if done:
        await events.notify(conn, task_id=task_id)
    return done
