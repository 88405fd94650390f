"""What the partner portal reads and writes beyond the other areas: its single-use
links (0023), the check of an open session, one tenant's task list and figures."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from hookrelay.outbox.models import Task, TenantId
from hookrelay.outbox.sql import sql
from hookrelay.outbox.store.console import MinuteCount

_LINK_INSERT = sql("portal_link_insert")
_LINKS_PURGE = sql("portal_links_purge")
_LINK_OPEN = sql("portal_link_open")
_TENANT_KEY = sql("portal_tenant_key")
_TASKS = sql("portal_tasks")
_FIGURES = sql("portal_delivery_figures")
_DURATIONS = sql("portal_attempt_durations")
_PER_HOUR = sql("portal_deliveries_per_hour")
_OPEN_CIRCUITS = sql("portal_open_circuits")


@dataclass(frozen=True, slots=True)
class OpenedLink:
    """A link just opened: whose, what it may do, and the key it was made under."""

    tenant_id: TenantId
    tenant_name: str
    read_only: bool
    api_key_hash: bytes


@dataclass(frozen=True, slots=True)
class TenantKey:
    name: str
    api_key_hash: bytes


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """The portal's task filters; None: any."""

    status: str | None = None
    type: str | None = None
    delivery_status: str | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class OutcomeCount:
    outcome: str
    hour: int
    day: int


@dataclass(frozen=True, slots=True)
class Durations:
    p50_ms: float | None
    p95_ms: float | None


@dataclass(frozen=True, slots=True)
class OpenCircuit:
    host: str
    state: str
    consecutive_failures: int
    last_error: str | None
    probe_at: datetime | None


async def insert_link(
    conn: asyncpg.Connection,
    *,
    token_hash: bytes,
    tenant_id: str,
    read_only: bool,
    created_by: str,
    ttl_s: float,
) -> datetime | None:
    """The new link's opening deadline; None if there is no such tenant."""
    expires: datetime | None = await conn.fetchval(
        _LINK_INSERT, token_hash, tenant_id, read_only, created_by, ttl_s
    )
    return expires


async def purge_links(conn: asyncpg.Connection) -> None:
    await conn.execute(_LINKS_PURGE)


async def open_link(conn: asyncpg.Connection, *, token_hash: bytes) -> OpenedLink | None:
    row = await conn.fetchrow(_LINK_OPEN, token_hash)
    return OpenedLink(*row) if row is not None else None


async def tenant_key(conn: asyncpg.Connection, *, tenant_id: str) -> TenantKey | None:
    row = await conn.fetchrow(_TENANT_KEY, tenant_id)
    return TenantKey(*row) if row is not None else None


async def tasks(
    conn: asyncpg.Connection,
    *,
    tenant_id: str,
    flt: TaskFilter,
    before: tuple[datetime, str] | None,
    limit: int,
) -> list[Task]:
    at, task_id = before if before else (None, None)
    rows = await conn.fetch(
        _TASKS,
        tenant_id,
        flt.status,
        flt.type,
        flt.delivery_status,
        flt.since,
        flt.until,
        at,
        task_id,
        limit,
    )
    return [Task.from_row(r) for r in rows]


async def delivery_figures(conn: asyncpg.Connection, *, tenant_id: str) -> list[OutcomeCount]:
    return [OutcomeCount(*r) for r in await conn.fetch(_FIGURES, tenant_id)]


async def attempt_durations(conn: asyncpg.Connection, *, tenant_id: str) -> Durations:
    return Durations(*await conn.fetchrow(_DURATIONS, tenant_id))


async def deliveries_per_hour(conn: asyncpg.Connection, *, tenant_id: str) -> list[MinuteCount]:
    """Per hour and outcome; each count's ``minute`` is its hour's start."""
    return [MinuteCount(*r) for r in await conn.fetch(_PER_HOUR, tenant_id)]


async def open_circuits(conn: asyncpg.Connection, *, tenant_id: str) -> list[OpenCircuit]:
    return [OpenCircuit(*r) for r in await conn.fetch(_OPEN_CIRCUITS, tenant_id)]
