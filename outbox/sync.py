"""The executor's functions for sync code: psycopg 3 ``Connection``, SQLAlchemy
``Connection`` or ``Session``.

The same plans as the async functions of ``outbox`` (one implementation of the
SQL and the rules), each run in the caller's transaction: a savepoint if one is
open, so the change commits with the caller's own work or not at all::

    with conn.transaction():                  # psycopg
        save_result(conn, ...)
        hookrelay.outbox.sync.complete_task(conn, task_id, "succeeded", result=...)

    with Session(engine) as session, session.begin():      # SQLAlchemy
        session.add(Invoice(...))
        hookrelay.outbox.sync.complete_task(session, task_id, "succeeded", result=...)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from hookrelay.outbox import tracing
from hookrelay.outbox.models import Task, TerminalStatus
from hookrelay.outbox.store.drivers import run_sync
from hookrelay.outbox.tasks.progress import progress_plan
from hookrelay.outbox.tasks.state_changes import (
    TimeoutReason,
    complete_plan,
    start_plan,
    timeout_plan,
)

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.orm import Session

    Connection: TypeAlias = psycopg.Connection[Any] | SAConnection | Session

__all__ = ["cancel_task", "complete_task", "report_progress", "start_task", "timeout_task"]


def start_task(
    conn: Connection,
    task_id: str,
    *,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> Task:
    """queued → running; ``traceparent``/``tracestate`` as in :func:`outbox.start_task`."""
    with tracing.change("start", task_id, traceparent, tracestate):
        return run_sync(conn, start_plan(task_id))


def complete_task(
    conn: Connection,
    task_id: str,
    status: TerminalStatus,
    result: Any = None,
    error: Any = None,
    *,
    tenant_id: str | None = None,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> Task:
    """As :func:`outbox.complete_task`: a live task → terminal ``status``, with its event."""
    with tracing.change("complete", task_id, traceparent, tracestate, status=status):
        return run_sync(conn, complete_plan(task_id, status, result, error, tenant_id=tenant_id))


def cancel_task(
    conn: Connection,
    task_id: str,
    *,
    tenant_id: str | None = None,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> Task:
    """→ cancelled, with a ``task.cancelled`` event."""
    return complete_task(
        conn,
        task_id,
        "cancelled",
        tenant_id=tenant_id,
        traceparent=traceparent,
        tracestate=tracestate,
    )


def timeout_task(conn: Connection, task_id: str, reason: TimeoutReason = "deadline") -> Task:
    """→ timed_out, with a ``task.timed_out`` event (as :func:`outbox.timeout_task`)."""
    return run_sync(conn, timeout_plan(task_id, reason))


def report_progress(
    conn: Connection,
    task_id: str,
    percent: float,
    message: str | None = None,
    *,
    tenant_id: str | None = None,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> Task:
    """As :func:`outbox.report_progress`: progress on a running task, pushed at commit."""
    with tracing.change("progress", task_id, traceparent, tracestate):
        return run_sync(conn, progress_plan(task_id, percent, message, tenant_id=tenant_id))
