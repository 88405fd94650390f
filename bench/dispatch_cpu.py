"""Dispatcher CPU per delivery against a bare HTTP client's per POST, in three shapes.

One ``hookrelay dispatch`` at default settings drains a backlog; in the same run, a
bare aiohttp client POSTs the same bodies to the same receiver process with the
same connections (the per-host cap, 20; the total cap, 200, over several hosts).
CPU time of each process, not wall time: on a shared machine it is the steadier
figure. Three shapes:

- one host, ``--events`` events (each size given), alternating bare client and
  drain ``--repeat`` times, with a PgQueuer + httpx peer (bench/pgq.py) per size;
- ``--hosts`` hosts (loopback addresses) x ``--per-host`` events;
- one host answering 500 to ``--fail-rate`` of requests: CPU per attempt until
  every event had its first attempt; the failed ones stay scheduled for a retry.

Also: rows claimed ÷ delivered, and the time from starting ``hookrelay dispatch``
to its first delivery (the backlog is there before it starts).

And the egress proxy: one host, ``--proxy-events`` events, drained directly and
through Debian's tinyproxy (``HOOKRELAY_EGRESS_PROXY``, a CONNECT tunnel per
connection), ``--repeat`` pairs, which of the two goes first alternating; the
dispatcher's rate and CPU per attempt of each. ``--proxy-only`` runs this alone.

    python -m bench dispatch_cpu [--events 10000,20000] [--repeat 3] [--pgq-jobs 2000]
                                 [--hosts 100] [--per-host 100] [--fail-rate 0.3]
                                 [--proxy-events 5000] [--proxy-only]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import asyncpg

from bench.common import ReceiverProcess, fresh_database, outbox_empty, record, server_dsn
from bench.pgq import pgq_rate
from bench.sched import PER_HOST, cpu_s, own_cpu_s
from hookrelay.outbox import complete_task
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store import changes
from hookrelay.outbox.store.pool import create_pool
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from tests.harness.procs import ROOT, hookrelay, master_key, service_env
from tests.harness.tinyproxy import Tinyproxy, tinyproxy_binary

TOTAL = 200  # DispatcherConfig.concurrency: in flight over every host


@dataclass(frozen=True)
class Drain:
    rate: float
    cpu_us: float  # per attempt
    attempts: int
    started_s: float  # from the process start to its first delivery
    counters: Counter[str]


async def fill(dsn: str, box: SecretBox, urls: list[str], n: int) -> bytes:
    """``n`` events spread over ``urls`` in turn; the body of one (they are alike)."""
    pool = await create_pool(dsn, max_size=2)
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "bench", box)
        for start in range(0, n, 1000):
            async with conn.transaction():
                for i in range(start, min(n, start + 1000)):
                    task, _ = await create_task(
                        conn, tenant.id, NewTask("bench", urls[i % len(urls)])
                    )
                    await complete_task(conn, task.id, "succeeded", result={"ok": True})
        # The tasks' changes are numbered for the status streams now, in the set-up,
        # as the API would at each commit: not by a sweeper in the middle of a drain.
        await changes.number_pending(conn)
        body = await conn.fetchval("SELECT body FROM events LIMIT 1")
    await pool.close()
    return str(body).encode()


async def bare(urls: list[str], body: bytes, n: int) -> tuple[float, float]:
    """(POST/s, CPU µs per POST) of a plain aiohttp loop over ``urls``, with the
    dispatcher's caps: 20 connections per host, 200 in all."""
    connector = aiohttp.TCPConnector(
        limit=min(TOTAL, PER_HOST * len(urls)), limit_per_host=PER_HOST
    )
    async with aiohttp.ClientSession(connector=connector) as session:
        left = n

        async def worker(k: int) -> None:
            nonlocal left
            i = k
            while left > 0:
                left -= 1
                i += 1
                async with session.post(
                    urls[i % len(urls)], data=body, headers={"content-type": "application/json"}
                ) as r:
                    await r.read()

        cpu0, started = own_cpu_s(), time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(min(TOTAL, PER_HOST * len(urls)))))
        return n / (time.perf_counter() - started), (own_cpu_s() - cpu0) / n * 1e6


async def drain(dsn: str, env: dict[str, str], n: int, *, first_pass: bool = False) -> Drain:
    """One dispatcher until the outbox is empty (``first_pass``: until every event had
    its first attempt recorded); CPU and rate from its first attempt on."""
    log = Path(tempfile.mkstemp(suffix=".log")[1])
    conn = await asyncpg.connect(dsn)
    launched = time.perf_counter()
    proc = subprocess.Popen(hookrelay("dispatch"), env=env, cwd=ROOT, stderr=log.open("wb"))
    try:
        while not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM delivery_attempts)"):
            await asyncio.sleep(0.005)
        first, cpu0 = time.perf_counter(), cpu_s(proc.pid)
        attempts0 = await conn.fetchval("SELECT count(*) FROM delivery_attempts")
        if first_pass:
            while await conn.fetchval("SELECT EXISTS (SELECT 1 FROM outbox WHERE attempts = 0)"):
                await asyncio.sleep(0.02)
        else:
            while not await outbox_empty(conn):
                await asyncio.sleep(0.02)
        elapsed, cpu = time.perf_counter() - first, cpu_s(proc.pid) - cpu0
        attempts = await conn.fetchval("SELECT count(*) FROM delivery_attempts") - attempts0
    finally:
        proc.terminate()
        proc.wait(60)
        await conn.close()
    counters: Counter[str] = Counter()
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("msg") == "dispatcher stopped":
            counters.update({k: int(v) for k, v in entry["counters"].items()})
    return Drain(n / elapsed, cpu / max(1, attempts) * 1e6, attempts, first - launched, counters)


async def through_proxy(
    server: str, box: SecretBox, key: str, n: int, repeat: int
) -> tuple[list[str], list[str]]:
    """Table lines and notes: direct drains beside drains through tinyproxy."""
    binary = tinyproxy_binary()
    if binary is None:
        return [], ["egress proxy: tinyproxy is not installed (apt-get install tinyproxy)"]
    rx, proxy = ReceiverProcess(), Tinyproxy(binary)
    drains: dict[bool, list[Drain]] = {False: [], True: []}
    try:
        for i in range(repeat):
            # Alternating which goes first, so neither gains from coming second.
            for proxied in (False, True) if i % 2 == 0 else (True, False):
                dsn = await fresh_database(server)
                await fill(dsn, box, [rx.url], n)
                extra = {"egress_proxy": proxy.url} if proxied else {}
                drains[proxied].append(
                    await drain(dsn, service_env(dsn, key, log_level="INFO", **extra), n)
                )
    finally:
        rx.stop()
        proxy.stop()
    lines = []
    for proxied, label in ((False, "direct"), (True, "through tinyproxy")):
        rate = statistics.median(d.rate for d in drains[proxied])
        cpu = statistics.median(d.cpu_us for d in drains[proxied])
        lines.append(
            f"| one host, {n:,} events, {label} (median of {repeat}) | {rate:,.0f} | | | "
            f"{cpu:.0f} / | | | |"
        )
    direct = statistics.median(d.rate for d in drains[False])
    proxied_rate = statistics.median(d.rate for d in drains[True])
    faults = sum(d.counters["local_faults"] for d in drains[True])
    notes = [
        f"egress proxy: drain through tinyproxy {proxied_rate / direct:.2f}× the direct "
        f"drain's rate; {faults} local faults"
    ]
    return lines, notes


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", default="10000,20000")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--pgq-jobs", type=int, default=2000)
    p.add_argument("--hosts", type=int, default=100)
    p.add_argument("--per-host", type=int, default=100)
    p.add_argument("--fail-rate", type=float, default=0.3)
    p.add_argument("--proxy-events", type=int, default=5000)
    p.add_argument("--proxy-only", action="store_true", help="only the egress proxy shape")
    args = p.parse_args()
    server, key = server_dsn(), master_key()
    box = SecretBox(base64.urlsafe_b64decode(key))
    env_of = lambda dsn: service_env(dsn, key, log_level="INFO")  # noqa: E731
    lines = [
        "| shape | hookrelay/s | bare client/s | ratio | CPU per attempt, µs: hookrelay / bare "
        "| CPU ratio | PgQueuer peer/s | × peer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    if args.proxy_only:
        more, also = await through_proxy(server, box, key, args.proxy_events, args.repeat)
        print("\n".join(lines + more) + "\n\n" + "\n".join(f"- {x}" for x in also))
        return
    rx = ReceiverProcess()
    try:
        for n in (int(x) for x in args.events.split(",")):
            pairs = []
            counters: Counter[str] = Counter()
            started = []
            for _ in range(args.repeat):
                dsn = await fresh_database(server)
                body = await fill(dsn, box, [rx.url], n)
                limit, bare_cpu = await bare([rx.url], body, n)
                got = await drain(dsn, env_of(dsn), n)
                pairs.append((got.rate, limit, got.cpu_us, bare_cpu))
                counters.update(got.counters)
                started.append(got.started_s)
            peer = await pgq_rate(server, rx.url, body, args.pgq_jobs, PER_HOST)
            rate, limit, cpu, bare_cpu = (statistics.median(x[i] for x in pairs) for i in range(4))
            ratios = sorted(x[0] / x[1] for x in pairs)
            cpus = sorted(x[2] / x[3] for x in pairs)
            lines.append(
                f"| one host, {n:,} events (median of {len(pairs)} pairs) | {rate:,.0f} | "
                f"{limit:,.0f} | {statistics.median(ratios):.2f} ({ratios[0]:.2f}–{ratios[-1]:.2f})"
                f" | {cpu:.0f} / {bare_cpu:.0f} | {statistics.median(cpus):.2f} "
                f"({cpus[0]:.2f}–{cpus[-1]:.2f}) | {peer:,.0f} | {rate / peer:.1f}× |"
            )
            claimed, delivered = counters["claimed"], counters["delivered"]
            share = claimed / max(1, delivered)
            notes.append(
                f"one host, {n:,} events: rows claimed ÷ delivered {share:.3f}"
                f" ({claimed:,} / {delivered:,}); start to first delivery "
                f"{statistics.median(started) * 1000:.0f} ms (median)"
            )
    finally:
        rx.stop()
    many = ReceiverProcess(hosts=args.hosts)
    try:
        n = args.hosts * args.per_host
        dsn = await fresh_database(server)
        body = await fill(dsn, box, many.urls, n)
        limit, bare_cpu = await bare(many.urls, body, n)
        got = await drain(dsn, env_of(dsn), n)
        lines.append(
            f"| {args.hosts} hosts × {args.per_host} events | {got.rate:,.0f} | {limit:,.0f} | "
            f"{got.rate / limit:.2f} | {got.cpu_us:.0f} / {bare_cpu:.0f} | "
            f"{got.cpu_us / bare_cpu:.2f} | | |"
        )
        notes.append(
            f"{args.hosts} hosts: rows claimed ÷ delivered "
            f"{got.counters['claimed'] / max(1, got.counters['delivered']):.3f}"
        )
    finally:
        many.stop()
    failing = ReceiverProcess("--fail-rate", str(args.fail_rate), "--seed", "7")
    try:
        n = min(int(x) for x in args.events.split(","))
        dsn = await fresh_database(server)
        body = await fill(dsn, box, [failing.url], n)
        limit, bare_cpu = await bare([failing.url], body, n)
        got = await drain(dsn, env_of(dsn), n, first_pass=True)
        conn = await asyncpg.connect(dsn)
        try:
            delivered = await conn.fetchval(
                "SELECT count(*) FROM tasks WHERE delivery_status = 'delivered'"
            )
            waiting = await conn.fetchval("SELECT count(*) FROM outbox WHERE attempts > 0")
        finally:
            await conn.close()
        lines.append(
            f"| one host, {args.fail_rate:.0%} of answers 500, {n:,} events (first pass) | "
            f"{got.rate:,.0f} | {limit:,.0f} | {got.rate / limit:.2f} | "
            f"{got.cpu_us:.0f} / {bare_cpu:.0f} | {got.cpu_us / bare_cpu:.2f} | | |"
        )
        notes.append(
            f"{args.fail_rate:.0%} answering 500: {got.attempts:,} attempts; {delivered:,} "
            f"delivered, {waiting:,} scheduled for a retry, {n - delivered - waiting} lost"
        )
    finally:
        failing.stop()
    more, also = await through_proxy(server, box, key, args.proxy_events, args.repeat)
    lines += more
    notes += also
    table = "\n".join(lines) + "\n\n" + "\n".join(f"- {x}" for x in notes) + "\n"
    print(table)
    record(
        "dispatch_cpu: CPU per delivery against a bare client",
        f"python -m bench dispatch_cpu --events {args.events} --repeat {args.repeat} "
        f"--pgq-jobs {args.pgq_jobs} --hosts {args.hosts} --per-host {args.per_host} "
        f"--fail-rate {args.fail_rate:g} --proxy-events {args.proxy_events}",
        table,
    )
