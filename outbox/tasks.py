"""Task rows: submission (with idempotency keys), lookup and the reconciliation listing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from . import ids, queries
from .errors import IdempotencyInFlight, IdempotencyKeyReused
from .models import Task


@dataclass(frozen=True, slots=True)
class NewTask:
    type: str
    callback_url: str
    input: Any = None
    metadata: Any = None
    timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class Idempotency:
    key: str
    request_hash: bytes


async def create_task(
    conn: asyncpg.Connection,
    tenant_id: str,
    spec: NewTask,
    *,
    idempotency: Idempotency | None = None,
) -> tuple[Task, bool]:
    """Insert a queued task; returns ``(task, created)``.

    With an idempotency key, a repeat of the same request returns the first
    task (``created`` False); a different body under the key raises
    :class:`IdempotencyKeyReused`; a repeat while the first is still in its
    transaction raises :class:`IdempotencyInFlight`.
    """
    if idempotency is None:
        # One statement, so one round trip: nothing to keep atomic with it.
        # (No NOTIFY: nobody can be waiting on a task that did not exist.)
        return Task.from_row(await _insert(conn, tenant_id, spec)), True
    async with conn.transaction():
        locked = await conn.fetchval(queries.IDEMPOTENCY_LOCK, tenant_id, idempotency.key)
        if not locked:
            raise IdempotencyInFlight(idempotency.key)
        seen = await conn.fetchrow(queries.IDEMPOTENCY_GET, tenant_id, idempotency.key)
        if seen is not None:
            if seen["request_hash"] != idempotency.request_hash:
                raise IdempotencyKeyReused(idempotency.key)
            row = await conn.fetchrow(queries.GET_TASK, seen["task_id"], tenant_id)
            return Task.from_row(row), False
        task = Task.from_row(await _insert(conn, tenant_id, spec))
        try:
            await conn.execute(
                queries.IDEMPOTENCY_PUT, tenant_id, idempotency.key,
                idempotency.request_hash, task.id,
            )
        except asyncpg.UniqueViolationError as exc:
            # The advisory lock makes this unreachable in practice; if two
            # requests still meet here, the loser must not create a task.
            raise IdempotencyInFlight(idempotency.key) from exc
    return task, True


async def _insert(conn: asyncpg.Connection, tenant_id: str, spec: NewTask) -> asyncpg.Record:
    row: asyncpg.Record = await conn.fetchrow(
        queries.INSERT_TASK, ids.task_id(), tenant_id, spec.type, spec.input,
        spec.callback_url, spec.metadata, spec.timeout_s,
    )
    return row


async def get_task(
    conn: asyncpg.Connection, task_id: str, *, tenant_id: str | None = None
) -> Task | None:
    """The task, or None if it does not exist (or belongs to another tenant)."""
    row = await conn.fetchrow(queries.GET_TASK, task_id, tenant_id)
    return Task.from_row(row) if row is not None else None


@dataclass(frozen=True, slots=True)
class Cursor:
    updated_at: datetime
    id: str


async def list_tasks(
    conn: asyncpg.Connection,
    tenant_id: str,
    *,
    status: str | None = None,
    updated_after: datetime | None = None,
    after: Cursor | None = None,
    limit: int = 100,
) -> tuple[list[Task], Cursor | None]:
    """One page in (updated_at, id) order and the cursor of the next, if any."""
    rows = await conn.fetch(
        queries.LIST_TASKS, tenant_id, status, updated_after,
        after.updated_at if after else None, after.id if after else None, limit + 1,
    )
    tasks = [Task.from_row(r) for r in rows[:limit]]
    more = len(rows) > limit
    nxt = Cursor(tasks[-1].updated_at, tasks[-1].id) if more and tasks else None
    return tasks, nxt
