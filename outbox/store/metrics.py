"""Database gauges read at scrape time, and the readiness ping."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from hookrelay.outbox.sql import sql

_PING = sql("ping")
_OLDEST_TRANSACTION = sql("oldest_transaction")
_OUTBOX_STATS = sql("outbox_stats")
_DEAD_LETTERS_BY_TENANT = sql("dead_letters_by_tenant")
_TASKS_BY_STATUS = sql("tasks_by_status")
_STALE_RUNNING = sql("stale_running_tasks")


@dataclass(frozen=True, slots=True)
class OutboxStats:
    depth: int
    oldest_due_s: float


async def ping(conn: asyncpg.Connection) -> bool:
    """One round trip: whether the server takes writes; raises whatever the connection raises."""
    return bool(await conn.fetchval(_PING))


async def oldest_transaction_s(conn: asyncpg.Connection) -> float:
    """Age in seconds of the oldest transaction open against this database (0 if none)."""
    return float(await conn.fetchval(_OLDEST_TRANSACTION))


async def outbox_stats(conn: asyncpg.Connection) -> OutboxStats:
    row = await conn.fetchrow(_OUTBOX_STATS)
    return OutboxStats(depth=row["depth"], oldest_due_s=row["oldest_due_s"])


async def dead_letters_by_tenant(conn: asyncpg.Connection) -> dict[str, int]:
    """Unreplayed dead letters per tenant (tenants with none are absent)."""
    return {r["tenant_id"]: r["n"] for r in await conn.fetch(_DEAD_LETTERS_BY_TENANT)}


async def tasks_by_status(conn: asyncpg.Connection) -> dict[str, int]:
    """Task count per status (statuses with none are absent)."""
    return {r["status"]: r["n"] for r in await conn.fetch(_TASKS_BY_STATUS)}


@dataclass(frozen=True, slots=True)
class StaleRunning:
    count: int
    oldest_s: float


async def stale_running_tasks(conn: asyncpg.Connection, *, after_s: float) -> StaleRunning:
    """Running tasks silent for over ``after_s``, and the oldest last sign of life."""
    row = await conn.fetchrow(_STALE_RUNNING, after_s)
    return StaleRunning(count=row["stale"], oldest_s=row["oldest_s"])
