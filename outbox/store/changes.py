"""The change log the status streams read: a tenant's changes in order, a task's by version.

A trigger on ``tasks`` queues each change at commit (see schema.sql), never
from Python, so every writer records its changes whatever driver it uses, and
no writer waits for another. :func:`number_pending` gives queued changes their
per-tenant numbers and moves them into the log; the readers below see the log
only, so a change is readable once it is numbered.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from hookrelay.outbox.models import Task
from hookrelay.outbox.sql import sql
from hookrelay.outbox.store import signals

# The numberer's NOTIFY channel, one notification per batch (signals.parse_changes
# reads it; hookrelay.outbox.store.signals has its format).
CHANGES_CHANNEL = signals.CHANGES.channel
# Changes numbered per call of number_changes; more are taken by the next call.
NUMBER_BATCH = 5000

_NUMBER_CHANGES = sql("number_changes")
_NUMBER_CHANGES_AND_WAKE = sql("number_changes_and_wake")
_CHANGES_AFTER = sql("changes_after")
_TASK_CHANGES_AFTER = sql("task_changes_after")
_STREAM_POSITION = sql("stream_position")
_TASK_OLDEST_VERSION = sql("task_oldest_version")
_CURRENT_CHANGES = sql("current_changes")


@dataclass(frozen=True, slots=True)
class LoggedChange:
    """One change: its per-tenant number, when it committed, the task at that version."""

    seq: int
    changed_at: datetime
    task: Task


@dataclass(frozen=True, slots=True)
class StreamPosition:
    last_seq: int  # 0 before the tenant's first change
    oldest_seq: int | None  # None when the log holds none of the tenant's changes


@dataclass(frozen=True, slots=True)
class Numbered:
    """What one numbering gave a tenant: its new last change number, and how many."""

    tenant_id: str
    last_seq: int
    count: int


async def number_pending(
    conn: asyncpg.Connection, *, wake: tuple[str, str] | None = None
) -> list[Numbered]:
    """Number every change committed so far; what each tenant got.

    Cheap when nothing waits (one index probe, no lock). Call it after a commit
    whose changes should reach the streams now, and before a read that must see
    every change committed before it (a stream's first position, a replay).
    ``wake``: (channel, payload) of a NOTIFY sent with the first numbering.
    """
    numbered: list[Numbered] = []
    while True:
        if wake is None:
            rows = await conn.fetch(_NUMBER_CHANGES, NUMBER_BATCH)
        else:
            rows = await conn.fetch(_NUMBER_CHANGES_AND_WAKE, NUMBER_BATCH, *wake)
            rows, wake = [r for r in rows if r[0] is not None], None
        numbered += [Numbered(r[0], r[1], r[2]) for r in rows]
        if sum(r[2] for r in rows) < NUMBER_BATCH:
            return numbered


def _changes(rows: list[asyncpg.Record]) -> list[LoggedChange]:
    return [LoggedChange(r["seq"], r["changed_at"], Task.from_row(r)) for r in rows]


async def changes_after(
    conn: asyncpg.Connection, *, tenant_id: str, after: int, limit: int
) -> list[LoggedChange]:
    """Up to ``limit`` of the tenant's changes numbered above ``after``, in order."""
    return _changes(await conn.fetch(_CHANGES_AFTER, tenant_id, after, limit))


async def task_changes_after(
    conn: asyncpg.Connection, *, task_id: str, version: int, limit: int
) -> list[LoggedChange]:
    """Up to ``limit`` changes of one task above ``version``, in version order."""
    return _changes(await conn.fetch(_TASK_CHANGES_AFTER, task_id, version, limit))


async def stream_position(conn: asyncpg.Connection, *, tenant_id: str) -> StreamPosition:
    row = await conn.fetchrow(_STREAM_POSITION, tenant_id)
    return StreamPosition(row["last_seq"], row["oldest_seq"])


async def task_oldest_version(conn: asyncpg.Connection, *, task_id: str) -> int | None:
    """The oldest version of the task still in the log (None: none is)."""
    oldest: int | None = await conn.fetchval(_TASK_OLDEST_VERSION, task_id)
    return oldest


async def current_changes(
    conn: asyncpg.Connection, *, tenant_id: str, task_ids: list[str]
) -> list[LoggedChange]:
    """The tenant's tasks among ``task_ids`` as they are now, each as the change that
    made its current version (``seq`` 0 once retention purged that change)."""
    rows = await conn.fetch(_CURRENT_CHANGES, tenant_id, task_ids)
    return [LoggedChange(r["seq"] or 0, r["changed_at"], Task.from_row(r)) for r in rows]
