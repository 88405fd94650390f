"""One busy partner host at default settings: drain rate, claim counts, and two yardsticks.

A backlog of events to one host is drained by one hookrelay dispatcher at its
defaults (20 in flight to one host). Measured in the same run, against the same
receiver process and the same bodies:

- a bare aiohttp client with as many connections as the per-host cap (the limit);
- a PgQueuer + httpx dispatcher written as PgQueuer's docs show (bench/pgq.py).

From the dispatcher's own counters: rows claimed, released and delivered.

    python -m bench sched [--events 20000] [--pgq-jobs 5000]
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import tempfile
from pathlib import Path

import asyncpg

from outbox.crypto import SecretBox
from outbox.dispatcher import DispatcherConfig

from .backlog import fill
from .common import ReceiverProcess, fresh_database, record, seconds_to_drain, server_dsn
from .e2e import bare_client_limit
from .pgq import pgq_rate
from .procs import ROOT, hookrelay, master_key, service_env

PER_HOST = DispatcherConfig.per_host_concurrency


async def drain_counted(dsn: str, env: dict[str, str], n: int) -> tuple[float, dict[str, int]]:
    """One dispatcher process drains the outbox: (delivered/s, its counters at stop)."""
    log = Path(tempfile.mkstemp(suffix=".log")[1])
    conn = await asyncpg.connect(dsn)
    proc = subprocess.Popen(hookrelay("dispatch"), env=env, cwd=ROOT, stderr=log.open("wb"))
    try:
        rate = n / await seconds_to_drain(conn)
    finally:
        proc.terminate()
        proc.wait(60)
        await conn.close()
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("msg") == "dispatcher stopped":
            return rate, {k: int(v) for k, v in entry["counters"].items()}
    raise RuntimeError("the dispatcher did not report its counters")


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=20000)
    p.add_argument("--pgq-jobs", type=int, default=5000)
    args = p.parse_args()
    server, key = server_dsn(), master_key()
    rx = ReceiverProcess()
    try:
        dsn = await fresh_database(server)
        await fill(dsn, SecretBox(base64.urlsafe_b64decode(key)), rx.url, args.events)
        conn = await asyncpg.connect(dsn)
        body = str(await conn.fetchval("SELECT body FROM events LIMIT 1")).encode()
        await conn.close()
        limit = await bare_client_limit(rx.url, body, args.events, PER_HOST)
        rate, counters = await drain_counted(
            dsn, service_env(dsn, key, log_level="INFO"), args.events
        )
        pgq = await pgq_rate(server, rx.url, body, args.pgq_jobs, PER_HOST)
    finally:
        rx.stop()
    claimed, delivered = counters.get("claimed", 0), counters.get("delivered", 0)
    table = (
        "| figure | value |\n|---|---|\n"
        f"| events, one host, default settings ({PER_HOST} in flight to it) | {args.events:,} |\n"
        f"| delivered/s, one dispatcher | {rate:,.0f} |\n"
        f"| bare aiohttp client, {PER_HOST} connections, POST/s | {limit:,.0f} |\n"
        f"| ratio to the bare client | {rate / limit:.2f} |\n"
        f"| PgQueuer + httpx ({args.pgq_jobs:,} jobs), delivered/s | {pgq:,.0f} |\n"
        f"| ratio to PgQueuer + httpx | {rate / pgq:.1f}x |\n"
        f"| rows claimed / released / delivered | {claimed:,} / "
        f"{counters.get('released', 0):,} / {delivered:,} |\n"
        f"| rows claimed ÷ delivered | {claimed / max(1, delivered):.3f} |\n"
    )
    print(table)
    record(
        "sched: one busy host at default settings",
        f"python -m bench sched --events {args.events} --pgq-jobs {args.pgq_jobs}",
        table,
    )
