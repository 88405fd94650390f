"""The lock that serialises schema changes."""

from __future__ import annotations

import asyncpg

from .._queries import sql

_LOCK = sql("apply_schema_lock")


async def take_schema_lock(conn: asyncpg.Connection) -> None:
    """Hold the schema lock until the caller's transaction ends."""
    await conn.execute(_LOCK)
