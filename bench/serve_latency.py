"""``hookrelay serve`` under a steady stream of completions through the API.

One ``hookrelay serve`` process (API + dispatcher + sweeper, default settings). Tasks
are submitted first; then an executor completes ``--rate`` of them a second with
``POST /v1/tasks/{id}/complete``. The receiver stamps each arrival against the
event's commit time (the completion), so the figure is complete→receipt.

    python -m bench serve_latency [--rate 1000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time

import aiohttp

from bench.common import ReceiverProcess, fresh_database, percentile, record, server_dsn
from tests.harness.procs import ROOT, free_port, hookrelay, master_key, service_env, wait_for_port

ADMIN = {"Authorization": "Bearer bench"}


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=float, default=1000)
    p.add_argument("--seconds", type=float, default=10)
    args = p.parse_args()
    dsn = await fresh_database(server_dsn())
    rx = ReceiverProcess()
    port = free_port()
    env = service_env(dsn, master_key(), host="127.0.0.1", port=port)
    serve = subprocess.Popen(hookrelay("serve"), env=env, cwd=ROOT)
    n = int(args.rate * args.seconds)
    late = 0
    try:
        wait_for_port(port, serve)
        base = f"http://127.0.0.1:{port}"
        connector = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(base, connector=connector) as http:
            async with http.post("/v1/admin/tenants", json={"name": "b"}, headers=ADMIN) as r:
                key = (await r.json())["apiKey"]
            submit = {"type": "bench", "callbackUrl": rx.url}
            auth = {"Authorization": f"Bearer {key}"}

            async def create() -> str:
                async with http.post("/v1/tasks", json=submit, headers=auth) as r:
                    return str((await r.json())["id"])

            ids: list[str] = []
            for start in range(0, n, 200):
                ids += await asyncio.gather(*(create() for _ in range(min(200, n - start))))

            async def complete(task_id: str) -> None:
                body = {"status": "succeeded", "result": {"ok": True}}
                async with http.post(
                    f"/v1/tasks/{task_id}/complete", json=body, headers=ADMIN
                ) as r:
                    r.raise_for_status()

            t0 = time.perf_counter()
            pending = []
            for i, task_id in enumerate(ids):
                delay = i / args.rate - (time.perf_counter() - t0)
                if delay > 0:
                    await asyncio.sleep(delay)
                else:
                    late += 1
                pending.append(asyncio.create_task(complete(task_id)))
            await asyncio.gather(*pending)
            offered = n / (time.perf_counter() - t0)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                async with http.get(f"/v1/tasks/{ids[-1]}", headers=auth) as r:
                    if (await r.json())["delivery"]["status"] == "delivered":
                        break
                await asyncio.sleep(0.2)
            await asyncio.sleep(1)
    finally:
        serve.terminate()
        serve.wait(30)
    stats = rx.stop()
    lat = list(stats["latencies_ms"])
    table = (
        f"offered: {offered:,.0f} completions/s for {args.seconds:g} s ({n:,} events), "
        f"through `POST /v1/tasks/{{id}}/complete`\n\n"
        "| figure | value |\n|---|---|\n"
        f"| delivered | {stats['unique']:,} of {n:,} |\n"
        f"| complete→receipt p50 / p95 / p99, ms | {percentile(lat, 0.5):.1f} / "
        f"{percentile(lat, 0.95):.1f} / {percentile(lat, 0.99):.1f} |\n"
    )
    print(table)
    record(
        "serve: steady completions through the API",
        f"python -m bench serve_latency --rate {args.rate:g} --seconds {args.seconds:g}",
        table,
    )
