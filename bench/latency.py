"""Commit → receipt latency at a steady offered load (where LISTEN/NOTIFY wake-up shows).

One dispatcher process, one receiver process; a producer commits one completion per
transaction at ``--rate`` events/s. The receiver stamps arrival against the event's
commit timestamp. The baseline, measured in the same run, is a bare aiohttp POST to
the same receiver at the same rate: the floor any dispatcher adds to.

    python -m bench latency [--rate 200] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import subprocess
import time

import aiohttp

from bench.common import ReceiverProcess, fresh_database, percentile, record, server_dsn
from hookrelay.outbox import complete_task
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store.pool import create_pool
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from tests.harness.procs import ROOT, hookrelay, master_key, service_env


async def bare_latency(url: str, rate: float, seconds: float) -> list[float]:
    out: list[float] = []
    async with aiohttp.ClientSession() as session:

        async def one() -> None:
            started = time.perf_counter()
            async with session.post(url, data=b"{}") as r:
                await r.read()
            out.append((time.perf_counter() - started) * 1000)

        tasks = []
        t0 = time.perf_counter()
        for i in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, i / rate - (time.perf_counter() - t0)))
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    return out


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=float, default=200)
    p.add_argument("--seconds", type=float, default=10)
    args = p.parse_args()
    dsn = await fresh_database(server_dsn())
    rx = ReceiverProcess()
    key = master_key()
    box = SecretBox(base64.urlsafe_b64decode(key))
    n = int(args.rate * args.seconds)
    pool = await create_pool(dsn, max_size=4)
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "bench", box)
        ids = [
            (await create_task(conn, tenant.id, NewTask("bench", rx.url)))[0].id for _ in range(n)
        ]
    env = service_env(dsn, key)
    proc = subprocess.Popen(
        hookrelay("dispatch"),
        env=env,
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    await asyncio.sleep(2)  # let it connect and LISTEN
    try:
        t0 = time.perf_counter()
        async with pool.acquire() as conn:
            for i, tid in enumerate(ids):
                await asyncio.sleep(max(0.0, i / args.rate - (time.perf_counter() - t0)))
                await complete_task(conn, tid, "succeeded")
        offered = n / (time.perf_counter() - t0)
        while await pool.fetchval("SELECT count(*) FROM outbox"):
            await asyncio.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(30)
        await pool.close()
    baseline = await bare_latency(rx.url, args.rate, min(args.seconds, 5))
    stats = rx.stop()
    lat = list(stats["latencies_ms"])
    rows = [("commit→receipt", lat), ("bare aiohttp POST (baseline)", baseline)]
    table = (
        f"offered load: {offered:,.0f} events/s for {args.seconds:g} s ({n} events)\n\n"
        "| path | p50 ms | p95 ms | p99 ms |\n|---|---|---|---|\n"
        + "".join(
            f"| {name} | {percentile(v, 0.5):.1f} | {percentile(v, 0.95):.1f} | "
            f"{percentile(v, 0.99):.1f} |\n"
            for name, v in rows
        )
    )
    table += (
        f"| ratio p50 (commit→receipt / baseline) | "
        f"{percentile(lat, 0.5) / percentile(baseline, 0.5):.1f}x | | |\n"
    )
    print(table)
    record(
        "latency: steady load",
        f"python -m bench latency --rate {args.rate:g} --seconds {args.seconds:g}",
        table,
    )
