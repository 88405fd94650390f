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
from enum import Enum
from typing import Any

import asyncpg
import msgspec

from hookrelay.outbox.errors import IdempotencyInFlight
from hookrelay.outbox.models import LIVE_STATUSES, EventId, Task, TaskId, TaskStatus, TenantId
from hookrelay.outbox.sql import sql
from hookrelay.outbox.store.events import TASKS_CHANNEL
from hookrelay.outbox.store.steps import Step

_INSERT_TASKS = sql("insert_tasks")
_GET_TASK = sql("get_task")
_LOCK_TASK = sql("lock_task")
_LIST_TASKS = sql("list_tasks")
_TRANSITION_TASK = sql("transition_task")
_FINISH_TASK = sql("finish_task")
_FINISH_TASKS = sql("finish_tasks")
_CLAIM_OVERDUE_TASKS = sql("claim_overdue_tasks")
_IDEMPOTENCY_LOCK = sql("idempotency_lock")
_IDEMPOTENCY_GET = sql("idempotency_get")
_REPORT_PROGRESS = sql("report_progress")
_REPORT_PROGRESSES = sql("report_progresses")
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


@dataclass(frozen=True, slots=True)
class TaskInsert:
    """One submit of :func:`insert_tasks`: the task's columns as its statement takes them.

    ``input``, ``metadata`` and ``on_timeout`` are JSON values (None: SQL NULL);
    ``callback_host`` the callback URL's destination key, kept in ``destination_keys``,
    which lets :func:`finish_step` complete the task in one statement (None: completed
    as a task of an older release is); ``sealed`` and ``header_names`` its sealed
    callback headers; ``idempotency`` (key, request hash), ``trace`` (traceparent,
    tracestate, already checked) and ``ordering_key`` None for none.
    """

    task_id: TaskId
    tenant_id: str
    type: str
    input: Any
    callback_url: str
    metadata: Any
    timeout_s: float | None
    heartbeat_timeout_s: float | None = None
    on_timeout: Any = None
    callback_host: str | None = None
    sealed: bytes | None = None
    header_names: Sequence[str] | None = None
    idempotency: tuple[str, bytes] | None = None
    trace: tuple[str, str | None] | None = None
    ordering_key: str | None = None


class KeyTaken(Enum):
    """Why a keyed submit of :func:`insert_tasks` wrote nothing."""

    IN_FLIGHT = "in_flight"  # the key's lock is held: its first submit is still open
    STORED = "stored"  # the key is stored already: read it (:func:`idempotency_get`)


# One submit as insert_tasks reads it from its JSON array: None (null) where it has
# none of a thing, bytes as base64.
class _Submitted(msgspec.Struct, omit_defaults=True):
    id: str
    tenant_id: str
    type: str
    callback_url: str
    input: msgspec.Raw | None = None
    metadata: msgspec.Raw | None = None
    timeout_s: float | None = None
    heartbeat_timeout_s: float | None = None
    on_timeout: msgspec.Raw | None = None
    host: str | None = None
    sealed: bytes | None = None
    header_names: str | None = None
    idem_key: str | None = None
    idem_hash: bytes | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    ordering_key: str | None = None


_encode_rows = msgspec.json.Encoder().encode


def _json_value(value: Any) -> msgspec.Raw | None:
    """``value`` as :func:`json_text` encodes it for every statement of the store (what
    it refuses, and how it spells values, is the same), set into the batch's array as
    it is; None stays null (SQL NULL)."""
    text = json_text(value)
    return None if text is None else msgspec.Raw(text.encode())


def _submits_json(rows: Sequence[TaskInsert]) -> str:
    """The one parameter of ``insert_tasks``: every row as a JSON array of objects."""
    out = []
    for r in rows:
        key, digest = r.idempotency or (None, None)
        parent, state = r.trace or (None, None)
        out.append(
            _Submitted(
                id=r.task_id,
                tenant_id=r.tenant_id,
                type=r.type,
                callback_url=r.callback_url,
                input=_json_value(r.input),
                metadata=_json_value(r.metadata),
                timeout_s=r.timeout_s,
                heartbeat_timeout_s=r.heartbeat_timeout_s,
                on_timeout=_json_value(r.on_timeout),
                host=r.callback_host,
                sealed=r.sealed,
                header_names=",".join(r.header_names) if r.header_names else None,
                idem_key=key,
                idem_hash=digest,
                traceparent=parent,
                tracestate=state,
                ordering_key=r.ordering_key,
            )
        )
    return _encode_rows(out).decode()


def _new_task(row: TaskInsert, got: asyncpg.Record) -> Task:
    """The task ``row`` wrote, as a read of it answers: a new task's columns are the
    submit's and the defaults of ``tasks`` (schema.sql). What the database alone knows
    comes back: its clock, and the JSON values as jsonb stored them (key order, and
    numbers in PostgreSQL's form: 1e16 reads back as 10000000000000000)."""
    created_at = got["created_at"]
    return Task(
        id=row.task_id,
        tenant_id=TenantId(row.tenant_id),
        type=row.type,
        status="queued",
        input=_stored(got["input"]),
        result=None,
        error=None,
        callback_url=row.callback_url,
        metadata=_stored(got["metadata"]),
        created_at=created_at,
        updated_at=created_at,
        completed_at=None,
        timeout_at=got["timeout_at"],
        version=1,
        event_id=None,
        delivery_status="none",
        delivery_attempts=0,
        last_attempt_at=None,
        last_status_code=None,
        last_error=None,
        next_attempt_at=None,
        delivered_at=None,
        heartbeat_timeout_s=row.heartbeat_timeout_s,
        on_timeout=_stored(got["on_timeout"]),
        callback_header_names=list(row.header_names) if row.header_names else None,
        ordering_key=row.ordering_key,
    )


def _stored(text: str | None) -> Any:
    return None if text is None else json.loads(text)


async def insert_tasks(
    conn: asyncpg.Connection, rows: Sequence[TaskInsert]
) -> list[Task | KeyTaken]:
    """New queued tasks, in one statement: for each row its :class:`Task`, or
    :class:`KeyTaken` for a keyed one that wrote nothing (its key's first submit is
    in flight, or stored). The other rows are written either way."""
    found = {r["submitted"]: r for r in await conn.fetch(_INSERT_TASKS, _submits_json(rows))}
    out: list[Task | KeyTaken] = []
    for row in rows:
        got = found[row.task_id]
        if got["created_at"] is not None:
            out.append(_new_task(row, got))
        else:
            out.append(KeyTaken.IN_FLIGHT if got["in_flight"] else KeyTaken.STORED)
    return out


async def insert_task(conn: asyncpg.Connection, **columns: Any) -> Task:
    """One new queued task (the keywords of :class:`TaskInsert`).

    :class:`IdempotencyInFlight` if its key's lock is held or the key is stored
    already: the loser of two requests must not create a task.
    """
    row = TaskInsert(**columns)
    [task] = await insert_tasks(conn, [row])
    if isinstance(task, KeyTaken):
        assert row.idempotency is not None
        raise IdempotencyInFlight(row.idempotency[0])
    return task


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
    return (
        *(task_id, status, json_text(result), json_text(error), event_id),
        *(",".join(allowed_from), tenant_id),
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


@dataclass(frozen=True, slots=True)
class Transition:
    """One transition of :func:`finish_tasks`, as :func:`finish_step` takes it."""

    task_id: str
    status: TaskStatus
    allowed_from: Sequence[TaskStatus]
    result: Any = None
    error: Any = None
    event_id: EventId | None = None
    tenant_id: str | None = None


# One transition as finish_tasks reads it from its JSON array.
class _Transitioned(msgspec.Struct):
    ord: int
    id: str
    status: str
    result: msgspec.Raw | None
    error: msgspec.Raw | None
    event_id: str | None
    allowed: str
    tenant_id: str | None


async def finish_tasks(
    conn: asyncpg.Connection, changes: Sequence[Transition]
) -> list[Task | None]:
    """:func:`finish_step` for many tasks in one statement: for each change the task
    as it left it, or None where it wrote nothing (see :func:`finish_step`). No two
    changes may name the same task."""
    return await _tasks_by_ord(conn, _FINISH_TASKS, finish_tasks_rows(changes), len(changes))


async def _tasks_by_ord(
    conn: asyncpg.Connection, statement: str, rows: str, n: int
) -> list[Task | None]:
    """A batch statement's answer: for each of its ``n`` rows the task its row ``ord``
    came back with, None where none did."""
    out: list[Task | None] = [None] * n
    for row in await conn.fetch(statement, rows):
        out[row["ord"]] = task_from_text(row)
    return out


def finish_tasks_rows(changes: Sequence[Transition]) -> str:
    """``finish_tasks``'s one parameter: the changes as one JSON array."""
    given = [
        _Transitioned(
            i,
            c.task_id,
            c.status,
            _json_value(c.result),
            _json_value(c.error),
            c.event_id,
            ",".join(c.allowed_from),
            c.tenant_id,
        )
        for i, c in enumerate(changes)
    ]
    return _encode_rows(given).decode()


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


@dataclass(frozen=True, slots=True)
class Report:
    """One progress report of :func:`report_progresses`, as :func:`progress_step` takes it."""

    task_id: str
    percent: float
    message: str | None
    tenant_id: str | None = None


# One report as report_progresses reads it from its JSON array.
class _Reported(msgspec.Struct):
    ord: int
    id: str
    percent: float
    message: str | None
    tenant_id: str | None


async def report_progresses(
    conn: asyncpg.Connection, reports: Sequence[Report]
) -> list[Task | None]:
    """:func:`progress_step` for many tasks in one statement: for each report the task
    as it left it, or None where it wrote nothing. No two reports may name one task."""
    return await _tasks_by_ord(
        conn, _REPORT_PROGRESSES, report_progresses_rows(reports), len(reports)
    )


def report_progresses_rows(reports: Sequence[Report]) -> str:
    """``report_progresses``'s one parameter: the reports as one JSON array."""
    given = [
        _Reported(i, r.task_id, r.percent, r.message, r.tenant_id) for i, r in enumerate(reports)
    ]
    return _encode_rows(given).decode()


def notify_task_step(*, task_id: str) -> Step:
    """Wake ``task_id``'s watchers when the transaction commits."""
    return Step(_NOTIFY_TASK, (task_id, TASKS_CHANNEL))


async def claim_silent_tasks(conn: asyncpg.Connection, *, limit: int) -> list[TaskId]:
    """Running tasks past their heartbeat deadline, row-locked (others' skipped)."""
    return [r["id"] for r in await conn.fetch(_CLAIM_SILENT_TASKS, limit)]
