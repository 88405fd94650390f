"""Task rows: submission (with idempotency keys), lookup and the reconciliation listing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from hookrelay.outbox import ids, tracing
from hookrelay.outbox.destinations import host_key
from hookrelay.outbox.errors import (
    ConfigurationError,
    IdempotencyInFlight,
    IdempotencyKeyReused,
    InvalidCallbackUrl,
)
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.keys.callback_headers import seal
from hookrelay.outbox.models import Task, TaskId
from hookrelay.outbox.store import tasks as store
from hookrelay.outbox.tracing import TraceContext


@dataclass(frozen=True, slots=True)
class NewTask:
    type: str
    callback_url: str
    input: Any = None
    metadata: Any = None
    timeout_s: float | None = None
    heartbeat_timeout_s: float | None = None  # a running task silent this long times out
    on_timeout: Any = None  # {result?, error?} written onto the task if it times out
    # Sent with every attempt of its webhook (keys.callback_headers, checked by the
    # caller); sealed under the master key, so create_task needs the box.
    callback_headers: Mapping[str, str] | None = None
    # The submitter's W3C trace context, kept for every attempt of the task's webhook
    # (hookrelay.outbox.tracing).
    trace: TraceContext | None = None
    # Webhooks of the tenant's tasks with the same key are delivered one at a time,
    # in the order their events commit (checked by the caller: 1 to 200 characters).
    ordering_key: str | None = None


@dataclass(frozen=True, slots=True)
class Idempotency:
    key: str
    request_hash: bytes


@dataclass(frozen=True, slots=True)
class Submission:
    """One submit of :func:`create_tasks`: whose, what, and its Idempotency-Key if any."""

    tenant_id: str
    spec: NewTask
    idempotency: Idempotency | None = None


Created = tuple[Task, bool]


async def create_task(
    conn: asyncpg.Connection,
    tenant_id: str,
    spec: NewTask,
    *,
    idempotency: Idempotency | None = None,
    box: SecretBox | None = None,
) -> Created:
    """Insert a queued task; returns ``(task, created)``.

    With an idempotency key, a repeat of the same request returns the first
    task (``created`` False); a different body under the key raises
    :class:`IdempotencyKeyReused`; a repeat while the first is still in its
    transaction raises :class:`IdempotencyInFlight`. ``box`` (the master key's) seals
    the spec's callback headers, if it has any. Inside the caller's transaction if it
    has one open (the key's lock is then held until it ends), else on its own.
    """
    [outcome] = await create_tasks(conn, [Submission(tenant_id, spec, idempotency)], box=box)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


async def create_tasks(
    conn: asyncpg.Connection,
    submissions: Sequence[Submission],
    *,
    box: SecretBox | None = None,
) -> list[Created | Exception]:
    """:func:`create_task` for many submits, written by one statement: for each its
    ``(task, created)`` or the error :func:`create_task` would raise for it alone.

    No two submissions may carry the same tenant and key (the coalescer sends the
    second in the next batch). A refusal of one (a key in flight or reused) never
    keeps the others from being written; an error of the statement itself is raised
    for the caller to retry each alone (nothing was written).
    """
    out: list[Created | Exception | None] = [None] * len(submissions)
    rows: list[store.TaskInsert] = []
    where: list[int] = []
    for i, sub in enumerate(submissions):
        try:
            rows.append(_row(sub, box))
        except ConfigurationError as exc:
            out[i] = exc
        else:
            where.append(i)
    written = await store.insert_tasks(conn, rows) if rows else []
    for i, task in zip(where, written, strict=True):
        out[i] = await _outcome(conn, submissions[i], task)
    return [o for o in out if o is not None]


async def _outcome(
    conn: asyncpg.Connection, sub: Submission, task: Task | store.KeyTaken
) -> Created | Exception:
    if isinstance(task, Task):
        return task, True
    assert sub.idempotency is not None, "only a keyed submit writes nothing"
    key = sub.idempotency.key
    if task is store.KeyTaken.STORED:
        seen = await store.idempotency_get(conn, tenant_id=sub.tenant_id, key=key)
        if seen is not None:
            if seen.request_hash != sub.idempotency.request_hash:
                return IdempotencyKeyReused(key)
            return seen.task, False
    # Held by a submit still in its transaction, or purged in between: ask again.
    return IdempotencyInFlight(key)


def _row(sub: Submission, box: SecretBox | None) -> store.TaskInsert:
    spec = sub.spec
    if spec.callback_headers and box is None:
        raise ConfigurationError("callback headers are sealed under the master key: pass box")
    task_id = TaskId(ids.task_id())
    sealed, names = None, None
    if spec.callback_headers and box is not None:
        sealed, names = seal(box, task_id, spec.callback_headers), list(spec.callback_headers)
    # The submitter's, else the submit request's span when tracing is on; else none
    # is stored and the webhook's trace-id comes from its event id.
    trace = spec.trace or tracing.current()
    idem = sub.idempotency
    return store.TaskInsert(
        task_id=task_id,
        tenant_id=sub.tenant_id,
        type=spec.type,
        input=spec.input,
        callback_url=spec.callback_url,
        metadata=spec.metadata,
        timeout_s=spec.timeout_s,
        heartbeat_timeout_s=spec.heartbeat_timeout_s,
        on_timeout=spec.on_timeout,
        callback_host=_destination(spec.callback_url),
        sealed=sealed,
        header_names=names,
        idempotency=None if idem is None else (idem.key, idem.request_hash),
        trace=None if trace is None else (trace.traceparent, trace.state),
        ordering_key=spec.ordering_key,
    )


def _destination(url: str) -> str | None:
    """The URL's destination key, kept on the task so that its completion is one
    statement; None if it has none (the completion then fails as it always has)."""
    try:
        return host_key(url)
    except InvalidCallbackUrl:
        return None


async def get_task(
    conn: asyncpg.Connection, task_id: str, *, tenant_id: str | None = None
) -> Task | None:
    """The task, or None if it does not exist (or belongs to another tenant)."""
    return await store.get_task(conn, task_id=task_id, tenant_id=tenant_id)


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
    rows = await store.list_tasks(
        conn,
        tenant_id=tenant_id,
        status=status,
        updated_after=updated_after,
        after=(after.updated_at, after.id) if after else None,
        limit=limit + 1,
    )
    tasks = rows[:limit]
    more = len(rows) > limit
    nxt = Cursor(tasks[-1].updated_at, tasks[-1].id) if more and tasks else None
    return tasks, nxt
