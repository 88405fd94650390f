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

from hookrelay.outbox.models import Task
from hookrelay.outbox.tasks import Cursor, list_tasks
from hookrelay.service.api.errors import BadRequest

CHUNK_ROWS = 20
# Every top-level field of the task resource; id and updatedAt always come back,
# since they are what a caller reconciles and resumes by.
TASK_FIELDS = frozenset(
    [
        "id",
        "type",
        "status",
        "input",
        "result",
        "error",
        "callbackUrl",
        "metadata",
        "createdAt",
        "updatedAt",
        "completedAt",
        "timeoutAt",
        "version",
        "delivery",
    ]
)
ALWAYS = frozenset({"id", "updatedAt"})


def parse_fields(raw: str | None) -> frozenset[str] | None:
    """``fields=id,status,delivery`` → those fields (plus id, updatedAt); None: all."""
    if raw is None:
        return None
    names = {name.strip() for name in raw.split(",") if name.strip()}
    unknown = sorted(names - TASK_FIELDS)
    if unknown or not names:
        raise BadRequest(
            f"fields must be a comma-separated list of: {', '.join(sorted(TASK_FIELDS))}"
        )
    return frozenset(names) | ALWAYS


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
    resource = task.to_resource()
    if fields is not None:
        resource = {k: v for k, v in resource.items() if k in fields}
    return json.dumps(resource, ensure_ascii=False, separators=(",", ":")).encode()


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
