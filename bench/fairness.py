"""One tenant's never-answering hosts against another tenant's steady traffic, at defaults.

Tenant X commits ``--x-events`` completions spread over ``--x-hosts`` destinations
that accept connections and never answer (bench/blackhole.py); once the
dispatcher is busy with them, tenant Y commits ``--y-rate`` completions a second
for ``--y-seconds`` to a fast receiver, which stamps each arrival against the
event's commit time. Y's complete→receipt is the figure; X's peak of requests
held open shows the share it got.

    python -m bench fairness [--x-events 1000] [--x-hosts 100] [--y-rate 100] [--y-seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import (
    ReceiverProcess,
    fresh_database,
    percentile,
    record,
    server_dsn,
    start_dispatcher,
)
from harness.procs import ROOT, free_port, master_key, service_env, wait_for_port
from hookrelay.outbox import complete_task
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store.pool import create_pool
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--x-events", type=int, default=1000)
    p.add_argument("--x-hosts", type=int, default=100)
    p.add_argument("--y-rate", type=float, default=100)
    p.add_argument("--y-seconds", type=float, default=10)
    args = p.parse_args()
    dsn, key = await fresh_database(server_dsn()), master_key()
    box = SecretBox(base64.urlsafe_b64decode(key))
    found: set[int] = set()
    while len(found) < args.x_hosts:
        found.add(free_port())
    ports = sorted(found)
    out = Path(tempfile.mkdtemp()) / "blackhole.json"
    hole = subprocess.Popen(
        [sys.executable, "-m", "bench._blackhole", ",".join(map(str, ports)), str(out)], cwd=ROOT
    )
    wait_for_port(ports[-1], hole)
    rx = ReceiverProcess()
    pool = await create_pool(dsn, max_size=4)
    async with pool.acquire() as conn:
        x = await create_tenant(conn, "x", box)
        y = await create_tenant(conn, "y", box)
        async with conn.transaction():
            for i in range(args.x_events):
                url = f"http://127.0.0.1:{ports[i % len(ports)]}/hook"
                task, _ = await create_task(conn, x.id, NewTask("bench", url))
                await complete_task(conn, task.id, "succeeded")
        n = int(args.y_rate * args.y_seconds)
        y_tasks = [
            (await create_task(conn, y.id, NewTask("bench", rx.url)))[0].id for _ in range(n)
        ]
    proc = start_dispatcher(service_env(dsn, key))
    try:
        await asyncio.sleep(3)  # X's requests now hang in every slot it may take
        t0 = time.perf_counter()
        async with pool.acquire() as conn:
            for i, tid in enumerate(y_tasks):
                await asyncio.sleep(max(0.0, i / args.y_rate - (time.perf_counter() - t0)))
                await complete_task(conn, tid, "succeeded")
            while await conn.fetchval("SELECT count(*) FROM outbox WHERE tenant_id = $1", y.id):
                await asyncio.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(60)
        await pool.close()
        hole.terminate()
        hole.wait(10)
    stats = rx.stop()
    held = json.loads(out.read_text())
    lat = list(stats["latencies_ms"])
    table = (
        "| figure | value |\n|---|---|\n"
        f"| tenant X: events to never-answering hosts | {args.x_events:,} "
        f"over {len(ports)} hosts |\n"
        f"| tenant X: most requests held open at once | {held['peak_open']} |\n"
        f"| tenant Y: events, offered | {n:,} at {args.y_rate:g}/s |\n"
        f"| tenant Y: delivered | {stats['unique']:,} |\n"
        f"| tenant Y complete→receipt p50 / p99 / max, ms | {percentile(lat, 0.5):.1f} / "
        f"{percentile(lat, 0.99):.1f} / {max(lat):.1f} |\n"
    )
    print(table)
    record(
        "fairness: a tenant's never-answering hosts",
        f"python -m bench fairness --x-events {args.x_events} --x-hosts {args.x_hosts} "
        f"--y-rate {args.y_rate:g} --y-seconds {args.y_seconds:g}",
        table,
    )
