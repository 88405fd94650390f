"""What the operations console reads and writes beyond the other areas: headline
figures, one event wherever it is, manual circuit closes and the audit trail."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from hookrelay.outbox.models import Attempt, AuditAction, EventId, TaskId, TenantId
from hookrelay.outbox.sql import sql
from hookrelay.outbox.store.deadletters import DeadLetterFilter
from hookrelay.outbox.store.events import OUTBOX_CHANNEL

_COUNT_DEAD_LETTERS = sql("count_dead_letters")
_OVERVIEW = sql("ops_overview")
_PER_MINUTE = sql("ops_deliveries_per_minute")
_EVENT = sql("ops_event")
_EVENT_ATTEMPTS = sql("ops_event_attempts")
_CLOSE_CIRCUIT = sql("ops_close_circuit")
_AUDIT_INSERT = sql("ops_audit_insert")
_AUDIT_LIST = sql("ops_audit_list")

# The depth is exact up to here, then shown as "at least".
DEPTH_CAP = 100_000


@dataclass(frozen=True, slots=True)
class Overview:
    depth: int
    oldest_due: timedelta | None
    dead_24h: int
    open_circuits: int


@dataclass(frozen=True, slots=True)
class MinuteCount:
    minute: datetime
    outcome: str
    n: int


@dataclass(frozen=True, slots=True)
class EventView:
    event_id: EventId
    tenant_id: TenantId
    task_id: TaskId | None
    event_type: str
    callback_url: str
    body: str
    created_at: datetime
    state: str  # pending | dead | replayed
    last_error: str | None
    last_status_code: int | None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    at: datetime
    actor: str
    action: AuditAction
    count: int
    filter: str
    reason: str


async def count_dead_letters(conn: asyncpg.Connection, *, flt: DeadLetterFilter) -> int:
    return int(await conn.fetchval(_COUNT_DEAD_LETTERS, *flt.args()))


async def overview(conn: asyncpg.Connection) -> Overview:
    return Overview(*await conn.fetchrow(_OVERVIEW, DEPTH_CAP))


async def deliveries_per_minute(conn: asyncpg.Connection, *, minutes: int) -> list[MinuteCount]:
    return [MinuteCount(*r) for r in await conn.fetch(_PER_MINUTE, minutes)]


async def event(conn: asyncpg.Connection, *, event_id: str) -> EventView | None:
    row = await conn.fetchrow(_EVENT, event_id)
    return EventView(*row) if row is not None else None


async def event_attempts(conn: asyncpg.Connection, *, event_id: str) -> list[Attempt]:
    return [Attempt(*r) for r in await conn.fetch(_EVENT_ATTEMPTS, event_id)]


async def close_circuit(conn: asyncpg.Connection, *, host: str) -> bool:
    """Close the host's circuit now; False if it was not open or half-open."""
    return await conn.fetchrow(_CLOSE_CIRCUIT, host, OUTBOX_CHANNEL) is not None


async def audit(
    conn: asyncpg.Connection,
    *,
    actor: str,
    action: AuditAction,
    count: int,
    filter: dict[str, Any],
    reason: str,
) -> None:
    await conn.execute(_AUDIT_INSERT, actor, action, count, json.dumps(filter), reason)


async def audit_log(conn: asyncpg.Connection, *, limit: int) -> list[AuditEntry]:
    return [AuditEntry(*r) for r in await conn.fetch(_AUDIT_LIST, limit)]
