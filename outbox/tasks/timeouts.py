"""The sweeper: live tasks past ``timeout_at``, and running tasks whose executor stopped
reporting for its heartbeat budget, become ``timed_out`` (with their event); rows past
retention are purged; and changes still queued for the status streams are numbered
(the API numbers its own at once; this is the floor for every other writer, even
with no API process running)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg

from hookrelay.outbox.ops.retention import purge
from hookrelay.outbox.store import changes, tasks
from hookrelay.outbox.store.pool import TRANSIENT_ERRORS
from hookrelay.outbox.tasks.transitions import timeout_task

log = logging.getLogger("hookrelay.sweeper")
BATCH = 500


async def sweep_once(pool: asyncpg.Pool, batch: int = BATCH) -> int:
    """Time out one batch of overdue tasks in one transaction; returns how many."""
    async with pool.acquire() as conn, conn.transaction():
        ids = await tasks.claim_overdue_tasks(conn, limit=batch)
        for task_id in ids:
            # The row lock taken above makes this transition certain to apply.
            await timeout_task(conn, task_id, "deadline")
        silent = await tasks.claim_silent_tasks(conn, limit=batch)
        for task_id in silent:
            await timeout_task(conn, task_id, "heartbeat")
    return len(ids) + len(silent)


@dataclass(frozen=True)
class Retention:
    attempts_s: float = 30 * 86400.0
    tasks_s: float = 90 * 86400.0
    # The status streams' change log: how far back a stream can resume.
    changes_s: float = 86400.0
    every_s: float = 60.0
    # A round purges for about this long at most; a round that used it all (more is
    # past retention) is followed by the next at the next sweep, not ``every_s`` later.
    budget_s: float = 5.0


async def run(
    pool: asyncpg.Pool, interval_s: float, stop: asyncio.Event, retention: Retention | None = None
) -> None:
    """Sweep every ``interval_s`` (at once again while batches come back full),
    and purge past retention every ``retention.every_s`` (at the next sweep again
    while a round runs out of time)."""
    next_purge = 0.0
    while not stop.is_set():
        try:
            # First and on its own: a failing purge or sweep must not stop it.
            async with pool.acquire() as conn:
                await changes.number_pending(conn)
        except Exception as exc:
            log.warning("numbering stream changes failed: %s", exc)
        try:
            if retention is not None and time.monotonic() >= next_purge:
                began = time.monotonic()
                next_purge = began + retention.every_s
                purged = await purge(
                    pool,
                    attempts_older_than_s=retention.attempts_s,
                    tasks_older_than_s=retention.tasks_s,
                    changes_older_than_s=retention.changes_s,
                    budget_s=retention.budget_s,
                )
                if time.monotonic() - began >= retention.budget_s:
                    # Cut short with more to purge: 100,000 expired tasks took three
                    # rounds, two minutes apart, at a minute between rounds.
                    next_purge = 0.0
                if any(purged):
                    log.info(
                        "purged %d attempt rows, %d tasks, %d test events and %d stream changes"
                        " past retention, and %d idle ordering keys",
                        *purged,
                    )
            n = await sweep_once(pool)
            if n:
                log.info("timed out %d tasks", n)
            if n == BATCH:
                continue
        except TRANSIENT_ERRORS as exc:
            log.warning("sweep failed, retrying: %s", exc)
        except Exception:
            log.exception("sweep failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)


@contextlib.asynccontextmanager
async def sweeping(
    pool: asyncpg.Pool, interval_s: float, retention: Retention | None = None
) -> AsyncIterator[None]:
    """Run the sweeper in the background for the duration of the block."""
    stop = asyncio.Event()
    task = asyncio.create_task(run(pool, interval_s, stop, retention), name="hookrelay-sweeper")
    try:
        yield
    finally:
        stop.set()
        await task
