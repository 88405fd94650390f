"""Retention: old attempt logs, finished tasks, test events and stream changes are purged
in small batches, until what is past retention is gone or the round's time is spent;
so are ordering keys with nothing waiting."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg

from hookrelay.outbox.store import retention as store

BATCH = 1000
Purge = Callable[..., Awaitable[int]]


async def _purge(pool: asyncpg.Pool, purge: Purge, cutoff: datetime, until: float) -> int:
    total = 0
    while True:
        async with pool.acquire() as conn:
            n = await purge(conn, before=cutoff, limit=BATCH)
        total += n
        if n < BATCH or time.monotonic() >= until:
            return total


async def purge(
    pool: asyncpg.Pool,
    *,
    attempts_older_than_s: float,
    tasks_older_than_s: float,
    changes_older_than_s: float = 86400.0,
    budget_s: float = 5.0,
) -> tuple[int, int, int, int, int]:
    """Delete what is past retention, batch by batch, for at most about ``budget_s``
    (what is left waits for the next round); returns (attempts, tasks, test events,
    stream changes, idle ordering keys).

    A fixed number of batches a round fell behind a busy service: ten batches a
    minute is 167 rows a second, and the change log alone takes thousands.

    Test events (``POST /v1/test-events``) belong to no task, so no task purge
    takes them: they go with the attempt log's retention, which is theirs.

    Each batch is its own short transaction, so a large purge never becomes
    one long-running delete.
    """
    now, until = datetime.now(UTC), time.monotonic() + budget_s
    attempts = await _purge(
        pool, store.purge_attempts, now - timedelta(seconds=attempts_older_than_s), until
    )
    tasks = await _purge(
        pool, store.purge_tasks, now - timedelta(seconds=tasks_older_than_s), until
    )
    pings = await _purge(
        pool, store.purge_test_events, now - timedelta(seconds=attempts_older_than_s), until
    )
    changes = await _purge(
        pool, store.purge_changes, now - timedelta(seconds=changes_older_than_s), until
    )
    keys = await _purge(pool, store.purge_ordering_keys, now, until)
    return attempts, tasks, pings, changes, keys
