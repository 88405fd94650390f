"""Progress reports, which are also the executor's heartbeat.

``report_progress`` runs on the caller's connection (any driver
``hookrelay.outbox.tasks.transitions`` takes), inside the executor's own transaction if it has
one: the report, the new version and the wake-up of the task's watchers commit
with the executor's work or not at all. A running task
whose executor stops reporting for ``heartbeatTimeoutSeconds`` is timed out by
the sweeper (``hookrelay.outbox.tasks.timeouts``), as when a killed process never reaches its
``finally``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from hookrelay.outbox import tracing
from hookrelay.outbox.errors import InvalidTransition, ProgressBackwards, TaskNotFound
from hookrelay.outbox.models import Task
from hookrelay.outbox.store import tasks
from hookrelay.outbox.store.drivers import run
from hookrelay.outbox.store.steps import Plan

if TYPE_CHECKING:
    from hookrelay.outbox.tasks.transitions import Connection

MAX_MESSAGE = 1000


def check_progress(percent: object, message: object) -> tuple[float, str | None]:
    """``percent`` a number in [0, 100], ``message`` a short string or None."""
    if (
        isinstance(percent, bool)
        or not isinstance(percent, int | float)
        or not math.isfinite(percent)
        or not 0 <= percent <= 100
    ):
        raise ValueError("percent must be a number from 0 to 100")
    if message is not None and (not isinstance(message, str) or len(message) > MAX_MESSAGE):
        raise ValueError(f"message must be a string of at most {MAX_MESSAGE} characters")
    if isinstance(message, str) and "\x00" in message:
        raise ValueError("message must not contain NUL characters")
    return float(percent), message


def progress_plan(
    task_id: str,
    percent: float,
    message: str | None = None,
    *,
    tenant_id: str | None = None,
    notify: bool = True,
) -> Plan[Task]:
    """The report as a plan; ValueError at once for a bad ``percent`` or ``message``."""
    percent, message = check_progress(percent, message)
    return _report(task_id, percent, message, tenant_id, notify)


def _report(
    task_id: str, percent: float, message: str | None, tenant_id: str | None, notify: bool
) -> Plan[Task]:
    task: Task | None = yield tasks.progress_step(
        task_id=task_id, percent=percent, message=message, tenant_id=tenant_id
    )
    if task is None:
        current: Task | None = yield tasks.get_step(task_id=task_id, tenant_id=tenant_id)
        if current is None:
            raise TaskNotFound(task_id)
        if current.status != "running":
            raise InvalidTransition(task_id, current)
        raise ProgressBackwards(task_id, current)
    if notify:
        yield tasks.notify_task_step(task_id=task.id)
    return task


async def report_progress(
    conn: Connection,
    task_id: str,
    percent: float,
    message: str | None = None,
    *,
    tenant_id: str | None = None,
    notify: bool = True,
    autocommit: bool = False,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> Task:
    """Record progress on a running task (and push it to its watchers at commit;
    ``notify`` and ``autocommit``: see ``outbox.complete_task``: the report is one
    statement, which commits on its own with ``autocommit``).

    Raises :class:`TaskNotFound`; :class:`InvalidTransition` if the task is not
    running; :class:`ProgressBackwards` if ``percent`` is below the last report.
    Both carry the task as it is now.
    """
    with tracing.change("progress", task_id, traceparent, tracestate):
        return await write_progress(
            conn,
            task_id,
            percent,
            message,
            tenant_id=tenant_id,
            notify=notify,
            autocommit=autocommit,
        )


async def write_progress(
    conn: Connection,
    task_id: str,
    percent: float,
    message: str | None = None,
    *,
    tenant_id: str | None = None,
    notify: bool = True,
    autocommit: bool = False,
) -> Task:
    """:func:`report_progress` without its span (``group_commit`` opens it in the request)."""
    notify = notify and not autocommit
    plan = progress_plan(task_id, percent, message, tenant_id=tenant_id, notify=notify)
    return await run(conn, plan, atomic=not autocommit)
