"""Status streams: SSE and WebSocket clients on one ``hookrelay api``, against long-polls.

One ``hookrelay api`` process; ``--clients`` tasks, running, spread over ``--tenants``
tenants; each task is followed by one SSE client (``GET /v1/tasks/{id}/events``), one
WebSocket client (``GET /v1/ws``, subscribed to it) and one long-poll client
(``GET /v1/tasks/{id}?wait=30``, the baseline), each kind in a process of its own
(bench/_streamclients.py). The API's resident set is read before any client, after the
SSE clients, after the WebSocket clients and after the long-polls, all idle. Then
``--rate`` progress reports per second (``outbox.report_progress`` on the bench's own
connections, as an executor would) go to random tasks for ``--seconds``; each report's
message is a marker, and the latency is from just before its transaction to the
moment a client read it (so it includes the commit).

    python -m bench streams [--clients 2000] [--rate 200] [--seconds 20] [--tenants 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench.common import fresh_database, percentile, record, server_dsn
from hookrelay.outbox import report_progress, start_task
from tests.harness.procs import ROOT, free_port, hookrelay, master_key, service_env, wait_for_port

KINDS = {"sse": "SSE", "ws": "WebSocket", "lp": "long-poll (baseline)"}


def rss_mb(pid: int) -> float:
    """The process's resident set now (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raise_nofile() -> int:
    """RLIMIT_NOFILE up to its hard limit (the children inherit it); the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


async def settle(pid: int, seconds: float = 3.0) -> float:
    """The RSS once the process has been idle for a moment."""
    await asyncio.sleep(seconds)
    return rss_mb(pid)


async def setup(url: str, dsn: str, n: int, tenants: int) -> list[tuple[str, str]]:
    """``n`` running tasks over ``tenants`` tenants: [api key, task id] pairs."""
    follows = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        keys = []
        for i in range(tenants):
            r = await c.post(
                "/v1/admin/tenants",
                json={"name": f"bench{i}"},
                headers={"Authorization": "Bearer bench"},
            )
            r.raise_for_status()
            keys.append(r.json()["apiKey"])
        for i in range(n):
            key = keys[i % tenants]
            r = await c.post(
                "/v1/tasks",
                json={"type": "bench", "callbackUrl": "http://127.0.0.1:9/hook"},
                headers={"Authorization": f"Bearer {key}"},
            )
            r.raise_for_status()
            follows.append((key, r.json()["id"]))
    conn = await asyncpg.connect(dsn)
    try:
        for _, task_id in follows:
            await start_task(conn, task_id)
    finally:
        await conn.close()
    return follows


class Clients:
    """One bench/_streamclients.py process."""

    def __init__(self, kind: str, url: str, follows_path: Path) -> None:
        self.kind = kind
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench._streamclients", kind, url, str(follows_path)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    async def connected(self) -> int:
        assert self.proc.stdout is not None
        line = await asyncio.to_thread(self.proc.stdout.readline)
        if not line.startswith("connected"):
            raise RuntimeError(f"{self.kind} clients: {line!r}")
        return int(line.split()[1])

    def results(self) -> dict[str, Any]:
        out, _ = self.proc.communicate("stop\n", timeout=120)
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result


async def drive(dsn: str, task_ids: list[str], rate: float, seconds: float) -> dict[str, float]:
    """``rate`` progress reports a second to random tasks; marker -> time before its transaction."""
    pool = await asyncpg.create_pool(dsn, min_size=8, max_size=8)
    sent: dict[str, float] = {}
    pending: set[asyncio.Task[Any]] = set()

    async def one(task_id: str, marker: str, value: int) -> None:
        async with pool.acquire() as conn:
            sent[marker] = time.time()
            await report_progress(conn, task_id, value, marker)

    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
        # One percent for all: two reports of a task may commit in either order,
        # and an equal percent is never "backwards"; the message is the marker.
        t = asyncio.create_task(one(random.choice(task_ids), f"m{i}", 50))
        pending.add(t)
        t.add_done_callback(pending.discard)
    await asyncio.gather(*pending)
    await pool.close()
    return sent


def latencies(sent: dict[str, float], seen: dict[str, list[float]]) -> tuple[list[float], int]:
    """Milliseconds from each change to each client that saw it; changes nobody saw."""
    got = [(t - sent[m]) * 1000 for m, times in seen.items() if m in sent for t in times]
    missed = sum(1 for m in sent if m not in seen)
    return got, missed


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--clients", type=int, default=2000, help="tasks, each with 1 client per kind")
    p.add_argument("--rate", type=float, default=200)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--tenants", type=int, default=20)
    p.add_argument("--kinds", default=",".join(KINDS), help="of sse,ws,lp")
    args = p.parse_args()
    kinds = {k: KINDS[k] for k in args.kinds.split(",")}
    nofile = raise_nofile()
    dsn = await fresh_database(server_dsn())
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = service_env(
        dsn,
        master_key(),
        host="127.0.0.1",
        port=port,
        max_connections=4 * args.clients + 100,
        streams_per_tenant=2 * args.clients,
    )
    api = subprocess.Popen(hookrelay("api"), env=env, cwd=ROOT)
    clients: list[Clients] = []
    try:
        wait_for_port(port, api)
        follows = await setup(url, dsn, args.clients, args.tenants)
        path = Path(tempfile.mkdtemp()) / "follows.json"
        path.write_text(json.dumps(follows))
        rss = {"none": await settle(api.pid)}
        for kind in kinds:
            clients.append(Clients(kind, url, path))
            up = await clients[-1].connected()
            if up != args.clients:
                raise RuntimeError(f"only {up} of {args.clients} {kind} clients connected")
            rss[kind] = await settle(api.pid)
        cpu_before, wall_before = cpu_s(api.pid), time.monotonic()
        sent = await drive(dsn, [t for _, t in follows], args.rate, args.seconds)
        api_cpu = (cpu_s(api.pid) - cpu_before) / (time.monotonic() - wall_before)
        await asyncio.sleep(2)  # the last changes reach their clients
        results = {c.kind: c.results() for c in clients}
    finally:
        for c in clients:
            if c.proc.poll() is None:
                c.proc.kill()
        api.terminate()
        api.wait(30)
    order = list(kinds)
    before = {k: rss[order[i - 1]] if i else rss["none"] for i, k in enumerate(order)}
    lines = [
        f"{args.clients:,} tasks over {args.tenants} tenants, each followed by one client of "
        f"each kind ({len(kinds) * args.clients:,} connections); {len(sent):,} progress reports at "
        f"{args.rate:g}/s; the API process used {api_cpu:.0%} of a core meanwhile; "
        f"API RSS {rss['none']:.0f} MB with no client; RLIMIT_NOFILE {nofile}; "
        f"load average {os.getloadavg()[0]:.1f} at the end",
        "",
        "| clients | p50 ms | p99 ms | max ms | deliveries | missed | errors "
        "| RSS per 1,000 idle |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, name in kinds.items():
        got, missed = latencies(sent, results[kind]["seen"])
        per_1000 = (rss[kind] - before[kind]) / args.clients * 1000
        lines.append(
            f"| {name} | {percentile(got, 0.5):.1f} | {percentile(got, 0.99):.1f} | "
            f"{max(got, default=float('nan')):.1f} | {len(got):,} | {missed} | "
            f"{results[kind]['errors']} | {per_1000:.1f} MB |"
        )
        for sample in results[kind].get("sample", []):
            print(f"  {kind} error: {sample}")
    lines.append("")
    table = "\n".join(lines)
    print(table)
    record(
        "streams: SSE and WebSocket clients",
        f"python -m bench streams --clients {args.clients} --rate {args.rate:g} "
        f"--seconds {args.seconds:g} --tenants {args.tenants} --kinds {args.kinds}",
        table,
    )
