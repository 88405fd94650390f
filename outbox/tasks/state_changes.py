"""A task's state changes as plans: the SQL steps and the rules, written once.

Each plan (``hookrelay.outbox.store.steps``) yields the statements it needs and decides
from their rows; it never touches a connection, so ``hookrelay.outbox.tasks.transitions``
(async: asyncpg, psycopg, SQLAlchemy) and ``hookrelay.outbox.sync`` run the same plans on
whatever connection the executor holds. A refusal (not found, not allowed) is
raised from inside the plan, so the driver's savepoint rolls back with it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal, cast

from hookrelay.outbox import ids
from hookrelay.outbox.destinations import host_key
from hookrelay.outbox.errors import InvalidTransition, TaskNotFound
from hookrelay.outbox.models import (
    LIVE_STATUSES,
    TERMINAL_STATUSES,
    EventId,
    Task,
    TaskStatus,
    TerminalStatus,
    iso,
)
from hookrelay.outbox.store import events, tasks
from hookrelay.outbox.store.steps import Plan, Step

__all__ = [
    "TimeoutReason",
    "autocommit_plan",
    "complete_plan",
    "destination_host",
    "event_body",
    "event_step",
    "start_plan",
    "timeout_plan",
]


def destination_host(url: str) -> str:
    """The destination key of a callback URL (``hookrelay.outbox.destinations``), the unit
    of per-host limits."""
    return host_key(url)


def event_body(task: Task) -> str:
    """The webhook body of ``task``'s terminal event, as its commit stores it.

    Built once, when the event is committed, and stored in ``events``; every
    attempt, retry, replay and redelivery sends those bytes. The commit builds it
    in SQL (``_event_body`` in queries.sql); this writes the same bytes from a Task,
    for an event that the database did not build (a task an older release
    submitted, an event stored before bodies were kept: see ``redelivery``). The
    body's own objects are compact; a JSON value of the task (input, result, ...)
    is written as PostgreSQL writes jsonb, with a blank after each ``,`` and ``:``.
    ``updatedAt`` is the completion time, as it is at commit.
    """
    at_commit = replace(task, updated_at=task.completed_at or task.updated_at)
    data = ",".join(
        f"{_dumps(name)}:{_dumps(value)}" for name, value in at_commit.to_event_data().items()
    )
    head = f'{{"type":{_dumps(f"task.{task.status}")},"timestamp":{_dumps(iso(task.completed_at))}'
    return f'{head},"data":{{{data}}}}}'


def _dumps(value: Any) -> str:
    # PostgreSQL's jsonb text: ", " and ": " between items, non-ASCII as it is.
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=False)


def event_step(task: Task) -> Step:
    """The outbox row for ``task``'s terminal event (dispatchers wake at the NOTIFY)."""
    assert task.event_id is not None
    return events.insert_outbox_step(
        event_id=task.event_id,
        tenant_id=task.tenant_id,
        task_id=task.id,
        event_type=f"task.{task.status}",
        callback_url=task.callback_url,
        host=destination_host(task.callback_url),
        body=event_body(task),
    )


def _transition(
    task_id: str,
    status: TaskStatus,
    allowed_from: Sequence[TaskStatus],
    *,
    result: Any = None,
    error: Any = None,
    tenant_id: str | None = None,
    notify: bool = True,
    in_transaction: bool = True,
) -> Plan[Task | None]:
    """The transition, and a terminal one's event, in one statement (``finish_step``).

    A task submitted by a release before 0018 has no destination key on its row:
    the statement leaves it be, and it is completed the older way, the transition
    and then the event built here, which must share a transaction. Not
    ``in_transaction`` (hookrelay's API, under autocommit), the plan then returns
    None before writing anything, for the caller to run it again in one.
    """
    terminal = status in TERMINAL_STATUSES
    new_event = EventId(ids.event_id()) if terminal else None
    change = {
        "task_id": task_id,
        "status": status,
        "allowed_from": allowed_from,
        "result": result,
        "error": error,
        "event_id": new_event,
        "tenant_id": tenant_id,
    }
    task: Task | None = yield tasks.finish_step(**change)
    if task is None:
        current: Task | None = yield tasks.get_step(task_id=task_id, tenant_id=tenant_id)
        if current is None:
            raise TaskNotFound(task_id)
        if not (terminal and current.status in allowed_from):
            raise InvalidTransition(task_id, current)
        # Allowed, yet not changed: a task without a destination key (older release).
        if not in_transaction:
            return None
        task = yield tasks.transition_step(**change)
        if task is None:  # another transition won since the read
            raise InvalidTransition(task_id, current)
        yield event_step(task)
    if notify:
        yield events.notify_step(task_id=task.id)
    return task


def start_plan(task_id: str, *, notify: bool = True) -> Plan[Task]:
    """queued → running."""
    # In a transaction, the plan never gives None.
    return cast("Plan[Task]", _transition(task_id, "running", ["queued"], notify=notify))


def complete_plan(
    task_id: str,
    status: TerminalStatus,
    result: Any = None,
    error: Any = None,
    *,
    tenant_id: str | None = None,
    notify: bool = True,
) -> Plan[Task]:
    """A live task → terminal ``status``, with its webhook event (ValueError at once
    for a status that is not terminal). ``notify``: see ``outbox.complete_task``."""
    _check_terminal(status)
    plan = _transition(
        task_id,
        status,
        LIVE_STATUSES,
        result=result,
        error=error,
        tenant_id=tenant_id,
        notify=notify,
    )
    return cast("Plan[Task]", plan)  # in a transaction, never None


def autocommit_plan(
    task_id: str,
    status: TaskStatus,
    result: Any = None,
    error: Any = None,
    *,
    tenant_id: str | None = None,
) -> Plan[Task | None]:
    """:func:`start_plan` (``running``) or :func:`complete_plan` (a terminal status)
    for a connection with no transaction open, where each statement commits on its
    own: one statement writes, with no NOTIFY (the caller wakes watchers after the
    commit). None, with nothing written, for a task that only a transaction can
    complete (submitted by a release before 0018): run :func:`complete_plan` then."""
    if status == "running":
        return _transition(task_id, status, ["queued"], notify=False, in_transaction=False)
    _check_terminal(status)
    return _transition(
        task_id,
        status,
        LIVE_STATUSES,
        result=result,
        error=error,
        tenant_id=tenant_id,
        notify=False,
        in_transaction=False,
    )


def _check_terminal(status: str) -> None:
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"{status!r} is not a terminal status")


TimeoutReason = Literal["deadline", "heartbeat"]


def timeout_plan(task_id: str, reason: TimeoutReason = "deadline") -> Plan[Task]:
    """→ timed_out: the task's ``onTimeout`` default if it has one, else an error
    saying which deadline passed."""
    current: Task | None = yield tasks.get_step(task_id=task_id)
    default = current.on_timeout if current is not None else None
    if isinstance(default, dict):
        result, error = default.get("result"), default.get("error")
    elif reason == "heartbeat":
        silent = current.heartbeat_timeout_s if current is not None else None
        # An executor may time a task out by heartbeat itself, with no timeout set.
        quiet_for = f" for {silent:g} s" if silent is not None else ""
        result, error = (
            None,
            {
                "code": "heartbeat_timeout",
                "message": f"no start or progress report{quiet_for}: the executor is presumed dead",
            },
        )
    else:
        result, error = (
            None,
            {
                "code": "timed_out",
                "message": "no result before the task's deadline",
            },
        )
    return (yield from complete_plan(task_id, "timed_out", result=result, error=error))
