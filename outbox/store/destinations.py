"""Per-host circuit state, as the dispatcher's outcome batches maintain it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from hookrelay.outbox.models import CircuitState
from hookrelay.outbox.sql import sql

_TAKE_PROBES = sql("take_probes")
_LIST_DESTINATIONS = sql("list_destinations")


@dataclass(frozen=True, slots=True)
class Destination:
    host: str
    state: CircuitState
    consecutive_failures: int
    last_error: str | None
    last_failure_at: datetime | None
    opened_at: datetime | None
    probe_at: datetime | None
    held: int  # events waiting in the outbox for this host


async def take_probes(conn: asyncpg.Connection, *, probe_s: float) -> list[str]:
    """Hosts whose open circuit is due a probe, now half-open and granted to this caller;
    their next probe is pushed ``probe_s`` seconds on."""
    return [r[0] for r in await conn.fetch(_TAKE_PROBES, probe_s)]


async def list_destinations(conn: asyncpg.Connection, *, limit: int) -> list[Destination]:
    """Hosts the breaker knows, unhealthy first."""
    return [Destination(*r) for r in await conn.fetch(_LIST_DESTINATIONS, limit)]
