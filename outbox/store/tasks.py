"""Task rows: insert, lookup, the guarded transition, the listing, idempotency keys.

The statements an executor's transaction runs (lookup, transition, progress and
its NOTIFY) are also offered as :class:`~.steps.Step` values, for the plans of
``hookrelay.outbox.tasks.transitions`` and ``hookrelay.outbox.tasks.progress`` to run on any driver.
Those steps send and read JSON as text (``_task_as_text`` in ``queries.sql``), so they
need no JSON codec on the connection: an executor's plain ``asyncpg.connect()``
works as hookrelay's own pool does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from hookrelay.outbox.errors import IdempotencyInFlight
from hookrelay.outbox.models import LIVE_STATUSES, EventId, Task, TaskId, TaskStatus
from hookrelay.outbox.sql import sql
from hookrelay.outbox.store.events import TASKS_CHANNEL
from hookrelay.outbox.store.steps import Step

_INSERT_TASK = sql("insert_task")
_INSERT_TASK_KEYED = sql("insert_task_keyed")
_INSERT_TASK_TRACED = sql("insert_task_traced")
_INSERT_TASK_KEYED_TRACED = sql("insert_task_keyed_traced")
_GET_TASK = sql("get_task")
_LOCK_TASK = sql("lock_task")
_LIST_TASKS = sql("list_tasks")
_TRANSITION_TASK = sql("transition_task")
_FINISH_TASK = sql("finish_task")
_CLAIM_OVERDUE_TASKS = sql("claim_overdue_tasks")
_IDEMPOTENCY_LOCK = sql("idempotency_lock")
_IDEMPOTENCY_GET = sql("idempotency_get")
_REPORT_PROGRESS = sql("report_progress")
_NOTIFY_TASK = sql("notify_task")
_CLAIM_SILENT_TASKS = sql("claim_silent_tasks")


def _task(row: asyncpg.Record | None) -> Task | None:
    return Task.from_row(row) if row is not None else None


# The jsonb columns of tasks, which ``_task_as_text`` gives as JSON text.
JSON_COLUMNS = ("input", "result", "error", "metadata", "progress", "on_timeout")


def task_from_text(row: Mapping[str, Any]) -> Task:
    """A task from a ``_task_as_text`` row: its JSON columns decoded here, as hookrelay's
    pool's codec decodes them (``json.loads``), whatever the connection's driver."""
    values = {name: row[name] for name in Task.__slots__}
    for name in JSON_COLUMNS:
        if values[name] is not None:
            values[name] = json.loads(values[name])
    return Task(**values)


def json_text(value: Any) -> str | None:
    """``value`` as the JSON text a jsonb argument of these steps takes, as hookrelay's
    pool's codec encodes it (``json.dumps``); None stays NULL."""
    return None if value is None else json.dumps(value)


async def insert_task(
    conn: asyncpg.Connection,
    *,
    task_id: TaskId,
    tenant_id: str,
    type: str,
    input: Any,
    callback_url: str,
    metadata: Any,
    timeout_s: float | None,
    heartbeat_timeout_s: float | None = None,
    on_timeout: Any = None,
    callback_host: str | None = None,
    callback_headers: tuple[bytes | None, list[str] | None] = (None, None),
    idempotency: tuple[str, bytes] | None = None,
    trace: tuple[str, str | None] | None = None,
) -> Task:
    """A new queued task; ``timeout_s`` None means no deadline. ``callback_host``:
    the callback URL's destination key, kept in ``destination_keys``, which lets
    :func:`finish_step` complete it in one statement (None: completed as a task of an
    older release is).

    ``idempotency`` (key, request hash) stores the key with it, in the same
    statement; :class:`IdempotencyInFlight` if a racing request stored it first.
    ``callback_headers``: the sealed headers and their names (None, None for none).
    ``trace`` is the submitter's (traceparent, tracestate), already checked; None
    writes no trace row.
    """
    args = (
        *(task_id, tenant_id, type, input, callback_url, metadata),
        *(timeout_s, heartbeat_timeout_s, on_timeout, callback_host, *callback_headers),
    )
    if idempotency is None:
        if trace is None:
            return Task.from_row(await conn.fetchrow(_INSERT_TASK, *args))
        return Task.from_row(await conn.fetchrow(_INSERT_TASK_TRACED, *args, *trace))
    try:
        if trace is None:
            row = await conn.fetchrow(_INSERT_TASK_KEYED, *args, *idempotency)
        else:
            row = await conn.fetchrow(_INSERT_TASK_KEYED_TRACED, *args, *idempotency, *trace)
    except asyncpg.UniqueViolationError as exc:
        # The advisory lock makes this unreachable in practice; if two
        # requests still meet here, the loser must not create a task.
        raise IdempotencyInFlight(idempotency[0]) from exc
    return Task.from_row(row)


def get_step(*, task_id: str, tenant_id: str | None = None) -> Step:
    """The task, or None; ``tenant_id`` None means any tenant (executor and ops)."""
    return Step(_GET_TASK, (task_id, tenant_id), task_from_text)


async def get_task(
    conn: asyncpg.Connection, *, task_id: str, tenant_id: str | None = None
) -> Task | None:
    """As :func:`get_step`, on an asyncpg connection."""
    row = await conn.fetchrow(_GET_TASK, task_id, tenant_id)
    return task_from_text(row) if row is not None else None


async def lock_task(
    conn: asyncpg.Connection, *, task_id: str, tenant_id: str | None = None
) -> Task | None:
    """The task, row-locked until the caller's transaction ends."""
    return _task(await conn.fetchrow(_LOCK_TASK, task_id, tenant_id))


async def list_tasks(
    conn: asyncpg.Connection,
    *,
    tenant_id: str,
    status: str | None,
    updated_after: datetime | None,
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[Task]:
    """Up to ``limit`` tasks in (updated_at, id) order after the ``after`` cursor,
    stopping at the oldest open transaction (see queries.sql)."""
    rows = await conn.fetch(
        _LIST_TASKS,
        tenant_id,
        status,
        updated_after,
        after[0] if after else None,
        after[1] if after else None,
        limit,
    )
    return [Task.from_row(r) for r in rows]


def transition_step(
    *,
    task_id: str,
    status: TaskStatus,
    allowed_from: Sequence[TaskStatus],
    result: Any = None,
    error: Any = None,
    event_id: EventId | None = None,
    tenant_id: str | None = None,
) -> Step:
    """Move the task to ``status`` if it is in one of ``allowed_from``: the task, or None
    if not (or if it does not exist). An ``event_id`` starts the delivery summary."""
    args = _transition_args(task_id, status, allowed_from, result, error, event_id, tenant_id)
    return Step(_TRANSITION_TASK, args, task_from_text)


def _transition_args(
    task_id: str,
    status: TaskStatus,
    allowed_from: Sequence[TaskStatus],
    result: Any,
    error: Any,
    event_id: EventId | None,
    tenant_id: str | None,
) -> tuple[Any, ...]:
    # a list: psycopg binds lists, not tuples, as arrays
    return (
        *(task_id, status, json_text(result), json_text(error), event_id),
        *(list(allowed_from), tenant_id),
    )


def finish_step(
    *,
    task_id: str,
    status: TaskStatus,
    allowed_from: Sequence[TaskStatus],
    result: Any = None,
    error: Any = None,
    event_id: EventId | None = None,
    tenant_id: str | None = None,
) -> Step:
    """As :func:`transition_step`, and with an ``event_id`` (a terminal status) the
    event and its outbox row too, in the same statement. None also when the task
    has no destination key (submitted by a release before 0018): nothing is
    written then, and the caller takes :func:`transition_step` and
    ``events.insert_outbox_step`` instead."""
    args = _transition_args(task_id, status, allowed_from, result, error, event_id, tenant_id)
    return Step(_FINISH_TASK, args, task_from_text)


async def claim_overdue_tasks(conn: asyncpg.Connection, *, limit: int) -> list[TaskId]:
    """Live tasks past their deadline, row-locked (SKIP LOCKED) for this transaction."""
    return [r["id"] for r in await conn.fetch(_CLAIM_OVERDUE_TASKS, limit, LIVE_STATUSES)]


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    request_hash: bytes
    task: Task


async def idempotency_lock(conn: asyncpg.Connection, *, tenant_id: str, key: str) -> bool:
    """Try the key's transaction-scoped lock; False if another transaction holds it."""
    return bool(await conn.fetchval(_IDEMPOTENCY_LOCK, tenant_id, key))


async def idempotency_get(
    conn: asyncpg.Connection, *, tenant_id: str, key: str
) -> IdempotencyRecord | None:
    row = await conn.fetchrow(_IDEMPOTENCY_GET, tenant_id, key)
    return IdempotencyRecord(row["request_hash"], Task.from_row(row)) if row is not None else None


def progress_step(
    *, task_id: str, percent: float, message: str | None, tenant_id: str | None = None
) -> Step:
    """Record progress on a running task: the task, or None if not found, not running
    or backwards."""
    return Step(_REPORT_PROGRESS, (task_id, percent, message, tenant_id), task_from_text)


def notify_task_step(*, task_id: str) -> Step:
    """Wake ``task_id``'s watchers when the transaction commits."""
    return Step(_NOTIFY_TASK, (task_id, TASKS_CHANNEL))


async def claim_silent_tasks(conn: asyncpg.Connection, *, limit: int) -> list[TaskId]:
    """Running tasks past their heartbeat deadline, row-locked (others' skipped)."""
    return [r["id"] for r in await conn.fetch(_CLAIM_SILENT_TASKS, limit)]
