"""Retention: old attempt logs, finished tasks, test events and stream changes are purged
in small batches."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg

from .store import retention as store

BATCH = 1000
Purge = Callable[..., Awaitable[int]]


async def _purge(pool: asyncpg.Pool, purge: Purge, cutoff: datetime, max_batches: int) -> int:
    total = 0
    for _ in range(max_batches):
        async with pool.acquire() as conn:
            n = await purge(conn, before=cutoff, limit=BATCH)
        total += n
        if n < BATCH:
            break
    return total


async def purge(
    pool: asyncpg.Pool,
    *,
    attempts_older_than_s: float,
    tasks_older_than_s: float,
    changes_older_than_s: float = 86400.0,
    max_batches: int = 10,
) -> tuple[int, int, int, int]:
    """Delete up to ``max_batches`` batches of each; returns (attempts, tasks, test
    events, stream changes).

    Test events (``POST /v1/test-events``) belong to no task, so no task purge
    takes them: they go with the attempt log's retention, which is theirs.

    Each batch is its own short transaction, so a large purge never becomes
    one long-running delete.
    """
    now = datetime.now(UTC)
    attempts = await _purge(
        pool, store.purge_attempts, now - timedelta(seconds=attempts_older_than_s), max_batches
    )
    tasks = await _purge(
        pool, store.purge_tasks, now - timedelta(seconds=tasks_older_than_s), max_batches
    )
    pings = await _purge(
        pool, store.purge_test_events, now - timedelta(seconds=attempts_older_than_s), max_batches
    )
    changes = await _purge(
        pool, store.purge_changes, now - timedelta(seconds=changes_older_than_s), max_batches
    )
    return attempts, tasks, pings, changes
