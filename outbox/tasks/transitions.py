"""State changes of a task, and the outbox event a terminal one writes.

Every function takes the caller's connection and runs inside a transaction on
it (a savepoint if the caller already opened one), so the status change, the
outbox row and the NOTIFY commit together with the caller's own work or not at
all. The connection may be asyncpg's, psycopg 3's ``AsyncConnection`` or a
SQLAlchemy ``AsyncConnection``/``AsyncSession`` (``hookrelay.outbox.sync`` has the same
functions for sync connections). Each change is written once, as a plan
(``hookrelay.outbox.tasks.state_changes``) that the store's drivers run on any of them.

``notify=False`` leaves the NOTIFY out. Notifying commits queue on one lock
across the whole PostgreSQL cluster, so a caller committing many changes a
second wakes dispatchers and watchers itself after its commit (as hookrelay's
API does), or lets them find the work at their next poll (dispatchers: every
``HOOKRELAY_POLL_INTERVAL_S``; status streams: the next sweep).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from hookrelay.outbox import tracing
from hookrelay.outbox.models import TERMINAL_STATUSES, Task, TerminalStatus
from hookrelay.outbox.store.drivers import run
from hookrelay.outbox.tasks.state_changes import (
    TimeoutReason,
    autocommit_plan,
    complete_plan,
    destination_host,
    event_body,
    start_plan,
    timeout_plan,
)

if TYPE_CHECKING:
    import asyncpg
    import psycopg
    from sqlalchemy.ext.asyncio import AsyncConnection as SAConnection
    from sqlalchemy.ext.asyncio import AsyncSession

    Connection: TypeAlias = (
        asyncpg.Connection | psycopg.AsyncConnection[Any] | SAConnection | AsyncSession
    )

__all__ = [
    "TERMINAL_STATUSES",
    "TerminalStatus",
    "TimeoutReason",
    "cancel_task",
    "complete_task",
    "destination_host",
    "event_body",
    "start_task",
    "timeout_task",
    "write_completion",
    "write_start",
]


async def start_task(
    conn: Connection,
    task_id: str,
    *,
    notify: bool = True,
    autocommit: bool = False,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> Task:
    """queued → running. ``autocommit``: see :func:`complete_task`.

    ``traceparent``/``tracestate`` (W3C, the executor's): the parent of this change's
    span when tracing is on (``hookrelay.outbox.tracing``); malformed ones are ignored.
    The task keeps its submitter's trace context either way. The same holds for every
    function here.
    """
    with tracing.change("start", task_id, traceparent, tracestate):
        return await write_start(conn, task_id, notify=notify, autocommit=autocommit)


async def write_start(
    conn: Connection, task_id: str, *, notify: bool = True, autocommit: bool = False
) -> Task:
    """:func:`start_task` without its span (``group_commit`` opens it in the request)."""
    if autocommit:
        task = await run(conn, autocommit_plan(task_id, "running"), atomic=False)
        assert task is not None, "a start is always one statement"
        return task
    return await run(conn, start_plan(task_id, notify=notify))


async def complete_task(
    conn: Connection,
    task_id: str,
    status: TerminalStatus,
    result: Any = None,
    error: Any = None,
    *,
    tenant_id: str | None = None,
    notify: bool = True,
    autocommit: bool = False,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> Task:
    """Move a live task to a terminal ``status`` and enqueue its webhook event.

    Raises :class:`TaskNotFound`, or :class:`InvalidTransition` (carrying the
    current task) if it is already terminal; nothing is written then.

    The task's transition, its event and its outbox row are one statement.
    ``autocommit`` (hookrelay's API): ``conn`` has no transaction open, and that
    statement commits on its own, in one round trip; no NOTIFY is sent (the
    caller wakes dispatchers and watchers after the commit, ``notify`` is
    ignored). A task submitted by a release before 0018 still takes a transaction.
    """
    with tracing.change("complete", task_id, traceparent, tracestate, status=status):
        return await write_completion(
            conn,
            task_id,
            status,
            result,
            error,
            tenant_id=tenant_id,
            notify=notify,
            autocommit=autocommit,
        )


async def write_completion(
    conn: Connection,
    task_id: str,
    status: TerminalStatus,
    result: Any = None,
    error: Any = None,
    *,
    tenant_id: str | None = None,
    notify: bool = True,
    autocommit: bool = False,
) -> Task:
    """:func:`complete_task` without its span (``group_commit`` opens it in the request)."""
    if autocommit:
        once = autocommit_plan(task_id, status, result, error, tenant_id=tenant_id)
        task = await run(conn, once, atomic=False)
        if task is not None:
            return task
        notify = False
    return await run(
        conn, complete_plan(task_id, status, result, error, tenant_id=tenant_id, notify=notify)
    )


async def cancel_task(
    conn: Connection,
    task_id: str,
    *,
    tenant_id: str | None = None,
    notify: bool = True,
    autocommit: bool = False,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> Task:
    """→ cancelled, with a ``task.cancelled`` event."""
    return await complete_task(
        conn,
        task_id,
        "cancelled",
        tenant_id=tenant_id,
        notify=notify,
        autocommit=autocommit,
        traceparent=traceparent,
        tracestate=tracestate,
    )


async def timeout_task(conn: Connection, task_id: str, reason: TimeoutReason = "deadline") -> Task:
    """→ timed_out, with a ``task.timed_out`` event.

    The task's ``onTimeout`` default (``{result?, error?}``), if it has one, is
    written onto it; otherwise an error saying which deadline passed.
    """
    return await run(conn, timeout_plan(task_id, reason))
