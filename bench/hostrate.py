"""HOOKRELAY_PER_HOST_RATE across dispatchers: do several together keep to the rate?

``--dispatchers`` ``hookrelay dispatch`` processes (3) with ``HOOKRELAY_PER_HOST_RATE``
set to each ``--rates`` value drain a backlog to one receiver (bench/_receiver.py,
another process). The receiver's arrival times give the achieved rate: requests after
the first, over the time from the first to the last (the bucket's first burst is then
at most one request early). The limit measured in the same run is the rate set; the
figure is achieved ÷ set, which must stay within 10 % (at most 1.10, and not far
below 1 unless the machine could not keep up). Also the busiest second, from the
same arrival times, against the rate plus the bucket's burst.

    python -m bench hostrate [--rates 20,100] [--seconds 10] [--dispatchers 3]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import signal

import asyncpg

from bench.common import (
    ReceiverProcess,
    fresh_database,
    outbox_empty,
    record,
    server_dsn,
    start_dispatcher,
)
from hookrelay.outbox import complete_task
from hookrelay.outbox.dispatch.host_rate import HostRate
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store import changes
from hookrelay.outbox.store.pool import create_pool
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from tests.harness.procs import master_key, service_env


async def fill(dsn: str, box: SecretBox, url: str, n: int) -> None:
    pool = await create_pool(dsn, max_size=2)
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "bench", box)
        async with conn.transaction():
            for _ in range(n):
                task, _ = await create_task(conn, tenant.id, NewTask("bench", url))
                await complete_task(conn, task.id, "succeeded", result={"ok": True})
        await changes.number_pending(conn)
    await pool.close()


async def one(rate: float, seconds: float, dispatchers: int) -> tuple[int, float, int, int]:
    """(requests, achieved rate, busiest second's requests, rows left due at the end)."""
    server, key = server_dsn(), master_key()
    box = SecretBox(base64.urlsafe_b64decode(key))
    dsn = await fresh_database(server)
    rx = ReceiverProcess("--commit-times")
    n = int(rate * seconds) + 1
    await fill(dsn, box, rx.url, n)
    env = service_env(dsn, key, per_host_rate=rate)
    procs = [start_dispatcher(env) for _ in range(dispatchers)]
    conn = await asyncpg.connect(dsn)
    try:
        while not await outbox_empty(conn):
            await asyncio.sleep(0.1)
        attempts = await conn.fetchval("SELECT max(delivery_attempts) FROM tasks")
        assert attempts == 1, "a held event spent an attempt"
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(30)
        await conn.close()
    seen = rx.stop()
    arrivals = sorted(
        c + ms / 1000 for c, ms in zip(seen["committed_at"], seen["latencies_ms"], strict=True)
    )
    achieved = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    busiest = max(
        sum(1 for t in arrivals[i:] if t < start + 1.0) for i, start in enumerate(arrivals)
    )
    return len(arrivals), achieved, busiest, n - len(arrivals)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rates", default="20,100")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--dispatchers", type=int, default=3)
    args = p.parse_args()
    rows = []
    for rate in [float(r) for r in args.rates.split(",")]:
        count, achieved, busiest, _ = await one(rate, args.seconds, args.dispatchers)
        burst = HostRate(rate).burst
        rows.append(
            f"| {rate:g} | {count} | {achieved:.1f} | {achieved / rate:.3f} | {busiest} | "
            f"{busiest / (rate + burst):.2f} |\n"
        )
    table = (
        f"{args.dispatchers} `hookrelay dispatch` processes, one receiver, a backlog of "
        f"rate × {args.seconds:g} s + 1 events; achieved = requests after the first ÷ time "
        "from the first to the last (receiver's clock)\n\n"
        "| rate set /s | requests | achieved /s | achieved ÷ set | busiest second | "
        "busiest ÷ (rate + burst) |\n|---|---|---|---|---|---|\n" + "".join(rows)
    )
    print(table)
    record(
        f"hostrate: {args.dispatchers} dispatchers sharing HOOKRELAY_PER_HOST_RATE",
        f"python -m bench hostrate --rates {args.rates} --seconds {args.seconds:g} "
        f"--dispatchers {args.dispatchers}",
        table,
    )
