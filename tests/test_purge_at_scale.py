"""Several sweepers purging a large expired backlog while deliveries drain (issue 31, part 5).

Every ``hookrelay dispatch`` runs a sweeper, and every sweeper purges past retention:
with several dispatchers, several purges run at once over the same rows. Our
peers' users saw cleanup deadlock or hang at scale (Svix #1933, #869). Here: 20,000
finished tasks past retention, each with its stored event, an idempotency key and two
attempt rows, purged by three sweepers at once beside a dispatcher that keeps
delivering. No deadlock, nothing left, and deliveries never stall for a second.
``python -m bench purge`` runs the same with 100,000 tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest

from hookrelay.outbox import complete_task
from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.store.pool import create_pool
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tasks.timeouts import Retention, sweeping
from hookrelay.outbox.tenants import create_tenant
from tests.harness.expired import expired_backlog, left_to_purge
from tests.receiver import Receiver
from tests.support import dispatcher, eventually, wait_drained

pytestmark = pytest.mark.anyio

EXPIRED = 20_000
PURGERS = 3


@pytest.mark.slow
async def test_concurrent_purges_of_a_large_backlog_beside_deliveries(
    pool, runtime, dsn, caplog
) -> None:
    rx = await Receiver().start()
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "acme", runtime.secret_box)
        await expired_backlog(conn, tenant.id, EXPIRED)
        await conn.execute("ANALYZE")
    assert await left_to_purge(pool) == (EXPIRED, EXPIRED, EXPIRED, 2 * EXPIRED)

    stop = asyncio.Event()
    produced = 0

    async def produce() -> None:
        """New events all along the purge, about 100 a second: well under what the
        dispatcher delivers, so any stall is the purge's."""
        nonlocal produced
        async with pool.acquire() as conn:
            while not stop.is_set():
                async with conn.transaction():
                    for _ in range(5):
                        task, _ = await create_task(
                            conn, tenant.id, NewTask(type="t", callback_url=rx.url)
                        )
                        await complete_task(conn, task.id, "succeeded")
                produced += 5
                await asyncio.sleep(0.05)

    # Each sweeper on a pool of its own, as each dispatch process has; purging every
    # 0.2 s so that the three overlap from their first round.
    retention = Retention(every_s=0.2)
    pools = [await create_pool(dsn, min_size=1, max_size=4) for _ in range(PURGERS)]
    caplog.set_level(logging.WARNING, logger="hookrelay.sweeper")
    try:
        async with running(dispatcher(runtime, pool)):
            producer = asyncio.create_task(produce())
            try:
                await rx.wait_for(30)  # delivering before the purge begins
                started = time.monotonic()
                since = len(rx.received)
                async with contextlib.AsyncExitStack() as stack:
                    for p in pools:
                        await stack.enter_async_context(sweeping(p, 0.1, retention))

                    async def purged() -> bool:
                        return await left_to_purge(pool) == (0, 0, 0, 0)

                    # Without idempotency_keys_task each purged task read every key
                    # (ON DELETE CASCADE): 30 s here, quadratic in the backlog; ~2 s with it.
                    await eventually(purged, 20, what="the expired backlog purged", every=0.2)
                    took = time.monotonic() - started
                    finished = len(rx.received)
            finally:
                stop.set()
                await producer
            await wait_drained(pool, timeout=30)
    finally:
        for p in pools:
            await p.close()
        await rx.stop()

    errors = [r.getMessage() for r in caplog.records if r.name == "hookrelay.sweeper"]
    assert not errors, errors  # no deadlock, no failed round
    arrivals = [r.at for r in rx.received[since:finished]]
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    longest = max(gaps, default=0.0)
    print(
        f"\npurge at scale: {EXPIRED} tasks, {2 * EXPIRED} attempts purged by {PURGERS} "
        f"sweepers in {took:.2f} s; {len(arrivals)} deliveries meanwhile, longest gap "
        f"{longest * 1000:.0f} ms"
    )
    assert len(arrivals) > 10, "deliveries stopped while the purge ran"
    assert longest < 1.0, f"deliveries stalled {longest:.2f} s during the purge"
    # Every event produced was delivered, and none of the new tasks was purged.
    assert len({r.headers["webhook-id"] for r in rx.received}) == produced
    assert await pool.fetchval("SELECT count(*) FROM tasks") == produced
