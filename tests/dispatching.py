"""Dispatcher test helpers: a backlog of committed events, a dispatcher wired as in production."""

from __future__ import annotations

import asyncio
import time

import asyncpg

from outbox import complete_task
from outbox.dispatcher import Dispatcher
from outbox.tasks import NewTask, create_task
from outbox.tenants import NewTenant, create_tenant
from service.runtime import Runtime
from service.workers import make_dispatcher


async def backlog(
    pool: asyncpg.Pool, runtime: Runtime, url: str, n: int, tenant: NewTenant | None = None
) -> tuple[NewTenant, list[str]]:
    """``n`` succeeded tasks whose events wait in the outbox; returns their event ids."""
    async with pool.acquire() as conn:
        if tenant is None:
            tenant = await create_tenant(conn, "acme", runtime.secret_box)
        events = []
        async with conn.transaction():
            for i in range(n):
                task, _ = await create_task(conn, tenant.id, NewTask(type="t", callback_url=url))
                done = await complete_task(conn, task.id, "succeeded", result={"i": i})
                assert done.event_id is not None
                events.append(done.event_id)
    return tenant, events


def dispatcher(runtime: Runtime, pool: asyncpg.Pool) -> Dispatcher:
    return make_dispatcher(runtime, pool)


async def wait_drained(pool: asyncpg.Pool, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while await pool.fetchval("SELECT count(*) FROM outbox"):
        if time.monotonic() > deadline:
            left = await pool.fetch("SELECT event_id, attempts, last_error FROM outbox LIMIT 5")
            raise AssertionError(f"outbox not drained: {[dict(r) for r in left]}")
        await asyncio.sleep(0.05)
