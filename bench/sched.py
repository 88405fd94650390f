"""One busy partner host at default settings: drain rate, claim counts, and two yardsticks.

A backlog of events to one host is drained by one hookrelay dispatcher at its
defaults (20 in flight to one host). Measured in the same run, against the same
receiver process and the same bodies:

- a bare aiohttp client with as many connections as the per-host cap (the limit);
- a PgQueuer + httpx dispatcher written as PgQueuer's docs show (bench/pgq.py).

From the dispatcher's own counters: rows claimed, released and delivered. CPU
time per delivery of the dispatcher process (from the first attempt to the
empty outbox) against the bare client's per POST: a figure that holds on a
loaded machine, where the rates do not.

With ``--repeat N`` the bare client and the drain take turns N times, each drain
on a fresh backlog, and the table gives the median of each figure and the range
of the ratio: on a shared machine one pair can land on a busy moment.

    python -m bench sched [--events 20000] [--pgq-jobs 5000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import resource
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import asyncpg

from bench.backlog import fill
from bench.common import ReceiverProcess, fresh_database, outbox_empty, record, server_dsn
from bench.e2e import bare_client_limit
from bench.pgq import pgq_rate
from hookrelay.outbox.dispatch.dispatcher import DispatcherConfig
from hookrelay.outbox.keys.at_rest import SecretBox
from tests.harness.procs import ROOT, hookrelay, master_key, service_env

PER_HOST = DispatcherConfig.per_host_concurrency


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process and its children have used so far
    (/proc/PID/stat): with ``--workers N`` hookrelay's work is done by its workers, and a
    worker that exited counts through its parent's reaped-children times."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            ticks += sum(
                int(f)
                for f in Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[11:15]
            )
        except (OSError, IndexError):  # exited meanwhile
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_busy_s() -> float:
    """CPU seconds all of this machine's cores have spent busy so far (/proc/stat):
    every process's, PostgreSQL's and the load generator's included; idle and I/O
    wait are not busy."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields)
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class BusyCores(threading.Thread):
    """How many cores of the machine were busy, on average, from ``after`` seconds
    after :meth:`start` for ``span`` seconds: a window inside a load generator's
    measured part, so its start and warm-up stay out."""

    def __init__(self, after: float, span: float) -> None:
        super().__init__(daemon=True)
        self._after, self._span = after, span
        self.cores = float("nan")

    def run(self) -> None:
        time.sleep(self._after)
        busy0, t0 = machine_busy_s(), time.perf_counter()
        time.sleep(self._span)
        self.cores = (machine_busy_s() - busy0) / (time.perf_counter() - t0)


async def drain_counted(
    dsn: str, env: dict[str, str], n: int, *, after: float = 0.0
) -> tuple[float, dict[str, int], float]:
    """One dispatcher process drains the outbox: (delivered/s, its counters at stop,
    its CPU seconds per delivery), timed from the first attempt to the empty outbox, or
    in steady state: from when ``after`` of the ``n`` (a fraction) had their attempt."""
    log = Path(tempfile.mkstemp(suffix=".log")[1])
    conn = await asyncpg.connect(dsn)
    proc = subprocess.Popen(hookrelay("dispatch"), env=env, cwd=ROOT, stderr=log.open("wb"))
    try:
        while not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM delivery_attempts)"):
            await asyncio.sleep(0.01)
        done = 0
        while after and done < after * n:
            done = await conn.fetchval("SELECT count(*) FROM delivery_attempts")
            await asyncio.sleep(0.005)
        first, cpu0 = time.perf_counter(), cpu_s(proc.pid)
        while not await outbox_empty(conn):
            await asyncio.sleep(0.02)
        rate = (n - done) / (time.perf_counter() - first)
        cpu = (cpu_s(proc.pid) - cpu0) / (n - done)
    finally:
        proc.terminate()
        proc.wait(60)
        await conn.close()
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("msg") == "dispatcher stopped":
            return rate, {k: int(v) for k, v in entry["counters"].items()}, cpu
    raise RuntimeError("the dispatcher did not report its counters")


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=20000)
    p.add_argument("--pgq-jobs", type=int, default=5000)
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    server, key = server_dsn(), master_key()
    rx = ReceiverProcess()
    runs: list[tuple[float, float, float, float]] = []  # limit, rate, bare CPU, CPU
    counters: Counter[str] = Counter()
    try:
        for _ in range(args.repeat):
            dsn = await fresh_database(server)
            await fill(dsn, SecretBox(base64.urlsafe_b64decode(key)), rx.url, args.events)
            conn = await asyncpg.connect(dsn)
            body = str(await conn.fetchval("SELECT body FROM events LIMIT 1")).encode()
            await conn.close()
            cpu0 = own_cpu_s()
            limit = await bare_client_limit(rx.url, body, args.events, PER_HOST)
            bare_cpu = (own_cpu_s() - cpu0) / args.events
            rate, got, cpu = await drain_counted(
                dsn, service_env(dsn, key, log_level="INFO"), args.events
            )
            counters.update(got)
            runs.append((limit, rate, bare_cpu, cpu))
        pgq = await pgq_rate(server, rx.url, body, args.pgq_jobs, PER_HOST)
    finally:
        rx.stop()
    limit, rate, bare_cpu, cpu = (statistics.median(r[i] for r in runs) for i in range(4))
    ratios = sorted(r[1] / r[0] for r in runs)
    spread = (
        f" ({ratios[0]:.2f} to {ratios[-1]:.2f} over {len(runs)} pairs)" if len(runs) > 1 else ""
    )
    claimed, delivered = counters.get("claimed", 0), counters.get("delivered", 0)
    table = (
        "| figure | value |\n|---|---|\n"
        f"| events, one host, default settings ({PER_HOST} in flight to it) | {args.events:,}"
        f"{f' x {len(runs)}' if len(runs) > 1 else ''} |\n"
        f"| delivered/s, one dispatcher | {rate:,.0f} |\n"
        f"| bare aiohttp client, {PER_HOST} connections, POST/s | {limit:,.0f} |\n"
        f"| ratio to the bare client | {statistics.median(ratios):.2f}{spread} |\n"
        f"| PgQueuer + httpx ({args.pgq_jobs:,} jobs), delivered/s | {pgq:,.0f} |\n"
        f"| ratio to PgQueuer + httpx | {rate / pgq:.1f}x |\n"
        f"| rows claimed / released / delivered | {claimed:,} / "
        f"{counters.get('released', 0):,} / {delivered:,} |\n"
        f"| rows claimed ÷ delivered | {claimed / max(1, delivered):.3f} |\n"
        f"| rows claimed ahead of a free slot | {counters.get('claimed_ahead', 0):,} |\n"
        f"| CPU per delivery, dispatcher process, µs | {cpu * 1e6:,.0f} |\n"
        f"| CPU per POST, bare client, µs | {bare_cpu * 1e6:,.0f} |\n"
    )
    print(table)
    record(
        "sched: one busy host at default settings",
        f"python -m bench sched --events {args.events} --pgq-jobs {args.pgq_jobs}"
        + (f" --repeat {args.repeat}" if args.repeat > 1 else ""),
        table,
    )
