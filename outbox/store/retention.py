"""Purges past retention, one bounded batch per call."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from hookrelay.outbox.models import TERMINAL_STATUSES
from hookrelay.outbox.sql import sql

_PURGE_ATTEMPTS = sql("purge_attempts")
_PURGE_TASKS = sql("purge_tasks")
_PURGE_TEST_EVENTS = sql("purge_test_events")
_PURGE_CHANGES = sql("purge_changes")
_PURGE_ORDERING_KEYS = sql("purge_ordering_keys")


def _count(status: str) -> int:
    return int(status.split()[-1])


async def purge_attempts(conn: asyncpg.Connection, *, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` attempt rows of finished events older than ``before``."""
    return _count(await conn.execute(_PURGE_ATTEMPTS, before, limit))


async def purge_tasks(conn: asyncpg.Connection, *, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` terminal tasks completed before ``before``, event not pending."""
    deleted: int = await conn.fetchval(_PURGE_TASKS, before, limit, TERMINAL_STATUSES)
    return deleted


async def purge_test_events(conn: asyncpg.Connection, *, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` finished test events (no task) created before ``before``."""
    return _count(await conn.execute(_PURGE_TEST_EVENTS, before, limit))


async def purge_changes(conn: asyncpg.Connection, *, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` stream changes logged before ``before``."""
    return _count(await conn.execute(_PURGE_CHANGES, before, limit))


async def purge_ordering_keys(conn: asyncpg.Connection, *, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` ordering keys with no event waiting (``before`` unused: a key
    keeps nothing worth a retention period)."""
    return _count(await conn.execute(_PURGE_ORDERING_KEYS, limit))
