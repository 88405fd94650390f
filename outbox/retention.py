"""Retention: old attempt logs and finished tasks are purged in small batches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from . import queries

BATCH = 1000


async def _purge(pool: asyncpg.Pool, query: str, cutoff: datetime, max_batches: int) -> int:
    total = 0
    for _ in range(max_batches):
        async with pool.acquire() as conn:
            status = await conn.execute(query, cutoff, BATCH)
        n = int(status.split()[-1])
        total += n
        if n < BATCH:
            break
    return total


async def purge(
    pool: asyncpg.Pool, *, attempts_older_than_s: float, tasks_older_than_s: float,
    max_batches: int = 10,
) -> tuple[int, int]:
    """Delete up to ``max_batches`` batches of each; returns (attempts, tasks) deleted.

    Each batch is its own short transaction, so a large purge never becomes
    one long-running delete.
    """
    now = datetime.now(UTC)
    attempts = await _purge(pool, queries.PURGE_ATTEMPTS,
                            now - timedelta(seconds=attempts_older_than_s), max_batches)
    tasks = await _purge(pool, queries.PURGE_TASKS,
                         now - timedelta(seconds=tasks_older_than_s), max_batches)
    return attempts, tasks
