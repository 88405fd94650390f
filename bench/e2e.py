"""Sustained delivery: one dispatcher process drains N committed events to one receiver process.

The limit is measured in the same run: a bare aiohttp client loop POSTing the same
bodies to the same receiver with no database. Prints ``ratio = delivered/s / limit/s``.

    python -m bench e2e [--events N] [--concurrency C]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import time

import aiohttp

from bench.common import ReceiverProcess, drain, fresh_database, record, server_dsn
from hookrelay.outbox import complete_task
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store import changes
from hookrelay.outbox.store.pool import create_pool
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from tests.harness.procs import master_key, service_env


async def bare_client_limit(url: str, body: bytes, n: int, concurrency: int) -> float:
    """POST/s of a plain aiohttp loop: the ceiling for any dispatcher on this machine."""
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        left = n

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                async with session.post(
                    url, data=body, headers={"content-type": "application/json"}
                ) as r:
                    await r.read()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return n / (time.perf_counter() - started)


async def fill(dsn: str, box: SecretBox, url: str, n: int) -> bytes:
    pool = await create_pool(dsn, max_size=4)
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "bench", box)
        for start in range(0, n, 1000):
            async with conn.transaction():
                for _ in range(min(1000, n - start)):
                    task, _ = await create_task(conn, tenant.id, NewTask("bench", url))
                    await complete_task(conn, task.id, "succeeded", result={"ok": True})
        # The tasks' changes are numbered for the status streams now, in the set-up,
        # as the API would at each commit: not by a sweeper in the middle of a drain.
        await changes.number_pending(conn)
        body = await conn.fetchval("SELECT body FROM events LIMIT 1")
    await pool.close()
    return str(body).encode()


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=20000)
    p.add_argument("--concurrency", type=int, default=200)
    args = p.parse_args()
    server = server_dsn()
    dsn = await fresh_database(server)
    rx = ReceiverProcess()
    key = master_key()
    box = SecretBox(base64.urlsafe_b64decode(key))
    body = await fill(dsn, box, rx.url, args.events)
    limit = await bare_client_limit(rx.url, body, args.events, 50)
    env = service_env(
        dsn,
        key,
        concurrency=args.concurrency,
        per_host_concurrency=args.concurrency,
        batch_size=500,
    )
    rate, _ = await drain(dsn, env, args.events)
    stats = rx.stop()
    ratio = rate / limit
    table = (
        "| figure | value |\n|---|---|\n"
        f"| events | {args.events} |\n"
        f"| delivered/s, one dispatcher | {rate:,.0f} |\n"
        f"| bare aiohttp client limit, POST/s | {limit:,.0f} |\n"
        f"| ratio = delivered/s / limit | {ratio:.2f} |\n"
        f"| requests received (dispatcher + limit loop) | {stats['count']} |\n"
    )
    print(table)
    record("e2e: sustained delivery", f"python -m bench e2e --events {args.events}", table)
