"""``GET /v1/tasks`` pages bounded in bytes as well as in rows, with optional ``fields=``.

300 tasks with 1 MB inputs made one ``?limit=1000`` answer 300 MB, and four at once
took the process to 2.66 GB. A page now stops before it would pass
``HOOKRELAY_MAX_PAGE_BYTES`` (always holding at least one task) and its ``nextCursor``
resumes right after the last task it holds. Rows are read from the database a few
at a time, so memory follows the page, not ``limit``. Each task is serialised once,
straight into the answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import msgspec

from hookrelay.outbox.models import Task
from hookrelay.outbox.tasks import Cursor, list_tasks

CHUNK_ROWS = 20
# id and updatedAt always come back with fields=: they are what a caller reconciles
# and resumes by. Which names fields= takes is the task resource's (shapes.TaskField).
ALWAYS = frozenset({"id", "updatedAt"})
_ENCODER = msgspec.json.Encoder()


def selected(fields: list[str] | None) -> frozenset[str] | None:
    """The fields of each task to show (``fields=``, plus id and updatedAt); None: all."""
    return None if fields is None else frozenset(fields) | ALWAYS


@dataclass(frozen=True, slots=True)
class PageQuery:
    tenant_id: str
    status: str | None
    updated_after: datetime | None
    after: Cursor | None
    limit: int
    fields: frozenset[str] | None
    max_bytes: int


def _encode(task: Task, fields: frozenset[str] | None) -> bytes:
    if fields is None:
        return _ENCODER.encode(task.resource())
    return _ENCODER.encode({k: v for k, v in task.to_resource().items() if k in fields})


async def task_page(conn: asyncpg.Connection, q: PageQuery) -> tuple[list[bytes], Cursor | None]:
    """Up to ``q.limit`` encoded tasks within ``q.max_bytes``, and the next cursor."""
    parts: list[bytes] = []
    size, cursor = 0, q.after
    while len(parts) < q.limit:
        tasks, nxt = await list_tasks(
            conn,
            q.tenant_id,
            status=q.status,
            updated_after=q.updated_after,
            after=cursor,
            limit=min(CHUNK_ROWS, q.limit - len(parts)),
        )
        for task in tasks:
            blob = _encode(task, q.fields)
            if parts and size + len(blob) > q.max_bytes:
                return parts, cursor  # the cursor of the last task included
            parts.append(blob)
            size += len(blob) + 1
            cursor = Cursor(task.updated_at, task.id)
        if nxt is None:
            return parts, None
    return parts, cursor


def page_body(parts: list[bytes], next_cursor: str | None) -> bytes:
    """``{"data": [...], "nextCursor": ...}`` from already encoded items."""
    return (
        b'{"data":['
        + b",".join(parts)
        + b'],"nextCursor":'
        + json.dumps(next_cursor).encode()
        + b"}"
    )
