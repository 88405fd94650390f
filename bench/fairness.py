"""Never-answering hosts against another tenant's steady traffic, at default settings.

Two shapes. The first (``python -m bench fairness``): one tenant's many hosts.
Tenant X commits ``--x-events`` completions spread over ``--x-hosts`` destinations
that accept connections and never answer (bench/blackhole.py); once the
dispatcher is busy with them, tenant Y commits ``--y-rate`` completions a second
for ``--y-seconds`` to a fast receiver, which stamps each arrival against the
event's commit time. Y's complete→receipt is the figure; X's peak of requests
held open shows the share it got.

    python -m bench fairness [--x-events 1000] [--x-hosts 100] [--y-rate 100] [--y-seconds 10]

The second (``python -m bench fairness tenants``): many tenants, one host each.
A normal tenant already flows at ``--rate`` completions a second to a fast receiver
when ``--attackers`` tenants each commit ``--per-attacker`` events to a host of
their own (127.0.0.2, 127.0.0.3, ...) that accepts connections and never answers:
each tenant stays under the per-tenant cap, each host fills its per-host cap. The
normal tenant's complete→receipt is measured before the attack (the baseline of the
same run) and during it; the attack lasts ``--attack-s``, longer than one attempt's
deadline (15 s), so a stall shows in full.

    python -m bench fairness tenants [--attackers 10] [--per-attacker 40] [--rate 20]
                                     [--baseline-s 10] [--attack-s 20]
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
from hookrelay.outbox import complete_task
from hookrelay.outbox.dispatch.dispatcher import DispatcherConfig
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store.pool import create_pool
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from tests.harness.procs import ROOT, free_port, master_key, service_env, wait_for_port


async def main() -> None:
    if sys.argv[1:2] == ["tenants"]:
        await tenants(sys.argv[2:])
    else:
        await one_tenant(sys.argv[1:])


async def one_tenant(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--x-events", type=int, default=1000)
    p.add_argument("--x-hosts", type=int, default=100)
    p.add_argument("--y-rate", type=float, default=100)
    p.add_argument("--y-seconds", type=float, default=10)
    args = p.parse_args(argv)
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


async def tenants(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m bench fairness tenants")
    p.add_argument("--attackers", type=int, default=10)
    p.add_argument("--per-attacker", type=int, default=40)
    p.add_argument("--rate", type=float, default=20)
    p.add_argument("--baseline-s", type=float, default=10)
    p.add_argument("--attack-s", type=float, default=20)
    args = p.parse_args(argv)
    if not 1 <= args.attackers <= 250:
        p.error("--attackers: 1 to 250 (one loopback address each)")
    dsn, key = await fresh_database(server_dsn()), master_key()
    box = SecretBox(base64.urlsafe_b64decode(key))
    hosts = [f"127.0.0.{i}" for i in range(2, args.attackers + 2)]
    port = free_port()
    out = Path(tempfile.mkdtemp()) / "blackhole.json"
    n = int(args.rate * (args.baseline_s + args.attack_s))
    attacked_at = float("inf")

    async def run(rx_url: str) -> None:
        nonlocal attacked_at
        pool = await create_pool(dsn, max_size=4)
        try:
            async with pool.acquire() as conn:
                normal = await create_tenant(conn, "normal", box)
                flow = [
                    (await create_task(conn, normal.id, NewTask("bench", rx_url)))[0].id
                    for _ in range(n)
                ]
                attack: list[str] = []
                for i, host in enumerate(hosts):
                    tenant = await create_tenant(conn, f"attacker-{i}", box)
                    url = f"http://{host}:{port}/hook"
                    for _ in range(args.per_attacker):
                        task, _ = await create_task(conn, tenant.id, NewTask("bench", url))
                        attack.append(task.id)

            async def strike() -> None:
                # Every attacker's events in one commit, while the normal tenant flows.
                nonlocal attacked_at
                await asyncio.sleep(args.baseline_s)
                async with pool.acquire() as conn, conn.transaction():
                    for tid in attack:
                        await complete_task(conn, tid, "succeeded")
                attacked_at = time.time()

            proc = start_dispatcher(service_env(dsn, key))
            try:
                await asyncio.sleep(2)  # the dispatcher is up before the flow starts
                striker = asyncio.create_task(strike())
                t0 = time.perf_counter()
                async with pool.acquire() as conn:
                    for i, tid in enumerate(flow):
                        await asyncio.sleep(max(0.0, i / args.rate - (time.perf_counter() - t0)))
                        await complete_task(conn, tid, "succeeded")
                    await striker
                    # Bounded: a stalled tenant waits out the attempts' deadline, no more.
                    deadline = time.monotonic() + 120
                    while time.monotonic() < deadline and await conn.fetchval(
                        "SELECT count(*) FROM outbox WHERE tenant_id = $1", normal.id
                    ):
                        await asyncio.sleep(0.05)
            finally:
                proc.terminate()
                proc.wait(60)
        finally:
            await pool.close()

    hole = subprocess.Popen(
        [sys.executable, "-m", "bench._blackhole", str(port), str(out), ",".join(hosts)], cwd=ROOT
    )
    try:
        wait_for_port(port, hole, host=hosts[-1])
        rx = ReceiverProcess("--commit-times")
        try:
            await run(rx.url)
        finally:
            stats = rx.stop()
    finally:
        hole.terminate()
        hole.wait(10)
    held = json.loads(out.read_text())
    pairs = list(zip(stats["committed_at"], stats["latencies_ms"], strict=True))
    before = [ms for at, ms in pairs if at < attacked_at]
    during = [ms for at, ms in pairs if at >= attacked_at]
    p99_before, p99_during = percentile(before, 0.99), percentile(during, 0.99)
    met = "yes" if p99_during <= 1000 else "**no**"

    def shown(values: list[float]) -> str:
        return (
            f"{percentile(values, 0.5):,.1f} / {percentile(values, 0.99):,.1f} / "
            f"{max(values, default=float('nan')):,.1f}"
        )

    table = (
        "| figure | value |\n|---|---|\n"
        f"| attackers | {args.attackers} tenants, {args.per_attacker} events each to its own "
        f"never-answering host ({hosts[0]}–{hosts[-1]}) |\n"
        f"| requests held open at once by the attackers, most | {held['peak_open']} "
        f"of {DispatcherConfig.concurrency} slots |\n"
        f"| normal tenant: offered | {args.rate:g}/s, {args.baseline_s:g} s before the attack "
        f"and {args.attack_s:g} s during it ({n:,} events) |\n"
        f"| normal tenant: delivered | {stats['unique']:,} |\n"
        f"| before the attack: complete→receipt p50 / p99 / max, ms | {shown(before)} |\n"
        f"| during the attack: complete→receipt p50 / p99 / max, ms | {shown(during)} |\n"
        f"| p99 during ÷ p99 before (same run) | {p99_during / p99_before:,.1f} |\n"
        f"| target: p99 during the attack ≤ 1,000 ms | {met} |\n"
    )
    print(table)
    record(
        "fairness: many tenants' never-answering hosts",
        f"python -m bench fairness tenants --attackers {args.attackers} "
        f"--per-attacker {args.per_attacker} --rate {args.rate:g} "
        f"--baseline-s {args.baseline_s:g} --attack-s {args.attack_s:g}",
        table,
    )
