"""Several dispatchers purge a large expired backlog while a delivery backlog drains.

Every ``hookrelay dispatch`` runs a sweeper, and each sweeper purges what is past
retention, so with several dispatchers several purges run over the same rows.
This fills finished tasks 100 days old (each with its stored event, an
idempotency key and two attempt rows 40 days old, all past the default retention)
beside a backlog of due events, starts the dispatchers at once (each purges at
start), and reports how long the purge took, whether any sweep failed (a
deadlock, say), and the longest pause between consecutive delivery attempts
while it ran. ``tests/test_purge_at_scale.py`` is the same at 20,000 in-process.

    python -m bench purge [--expired 100000] [--backlog 40000] [--dispatchers 3]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import subprocess
import tempfile
import time
from pathlib import Path

import asyncpg

from bench.backlog import fill
from bench.common import (
    RELIABILITY,
    RELIABILITY_HEADER,
    ReceiverProcess,
    fresh_database,
    record,
    server_dsn,
    server_facts,
)
from hookrelay.outbox.keys.at_rest import SecretBox
from tests.harness.expired import expired_backlog, left_to_purge
from tests.harness.procs import ROOT, hookrelay, master_key, service_env

# Each receiver answer takes this long, so the backlog drains for the whole purge.
HOLD_S = 0.05


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--expired", type=int, default=100_000)
    p.add_argument("--backlog", type=int, default=40_000)
    p.add_argument("--dispatchers", type=int, default=3)
    args = p.parse_args()
    server, key = server_dsn(), master_key()
    dsn = await fresh_database(server)
    rx = ReceiverProcess("--hang-rate", "1", "--hang-s", str(HOLD_S))
    await fill(dsn, SecretBox(base64.urlsafe_b64decode(key)), rx.url, args.backlog)
    conn = await asyncpg.connect(dsn)
    tenant = await conn.fetchval("SELECT id FROM tenants")
    await expired_backlog(conn, tenant, args.expired)
    await conn.execute("VACUUM ANALYZE")
    logs = Path(tempfile.mkdtemp())
    env = service_env(dsn, key, per_host_concurrency=20, batch_size=100)
    procs = []
    started = time.monotonic()
    for i in range(args.dispatchers):
        with open(logs / f"dispatch{i}.log", "wb") as log:
            procs.append(subprocess.Popen(hookrelay("dispatch"), env=env, cwd=ROOT, stderr=log))
    try:
        # (database time, rows left) every half second: the purge's active spells.
        samples = [(await conn.fetchval("SELECT now()"), await left_to_purge(conn))]
        while samples[-1][1] != (0, 0, 0, 0):
            if time.monotonic() - started > 600:
                raise SystemExit(f"not purged after 600 s: {samples[-1][1]} left")
            await asyncio.sleep(0.5)
            samples.append((await conn.fetchval("SELECT now()"), await left_to_purge(conn)))
        took = time.monotonic() - started
        spells = [(a[0], b[0]) for a, b in zip(samples, samples[1:], strict=False) if a[1] != b[1]]
        purging = sum((b - a).total_seconds() for a, b in spells)
        # Attempt start times while a purge ran: the longest pause in the flow.
        gap, attempts = await conn.fetchrow(
            """SELECT COALESCE(max(gap), 0), count(*) FROM (
                   SELECT extract(epoch FROM attempted_at - lag(attempted_at)
                                  OVER (ORDER BY attempted_at)) AS gap, attempted_at
                     FROM delivery_attempts WHERE attempted_at > $1) g
                WHERE EXISTS (SELECT 1 FROM unnest($2::timestamptz[], $3::timestamptz[]) s(a, b)
                               WHERE g.attempted_at BETWEEN s.a AND s.b)""",
            samples[0][0],
            [a for a, _ in spells],
            [b for _, b in spells],
        )
        backlog_left = await conn.fetchval("SELECT count(*) FROM outbox")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        rx.stop()
    failed = [
        line
        for i in range(args.dispatchers)
        for line in (logs / f"dispatch{i}.log").read_text(errors="replace").splitlines()
        if "sweep failed" in line or "deadlock" in line.lower()
    ]
    await conn.close()
    table = "\n".join(
        [
            "| figure | value |",
            "|---|---|",
            f"| expired tasks (each with event, idempotency key, 2 attempts) | {args.expired:,} |",
            f"| dispatchers (each purging at start) | {args.dispatchers} |",
            f"| delivery backlog (receiver holding each answer {HOLD_S * 1000:.0f} ms) "
            f"| {args.backlog:,} |",
            f"| purge finished after (from the dispatchers' start) | {took:.1f} s |",
            f"| of which rows were being purged (half-second samples) | {purging:.1f} s |",
            f"| failed sweeps (deadlocks or other) | {len(failed)} |",
            f"| delivery attempts while rows were being purged | {attempts:,} |",
            f"| longest pause between attempts then | {float(gap) * 1000:.0f} ms |",
            f"| delivery backlog still waiting when the purge finished | {backlog_left:,} |",
            "",
            f"database: {await server_facts(server)}",
            "",
        ]
    )
    print(table)
    for line in failed[:5]:
        print(line)
    record(
        "purges of a large expired backlog beside deliveries",
        f"python -m bench purge --expired {args.expired} --backlog {args.backlog} "
        f"--dispatchers {args.dispatchers}",
        table,
        file=RELIABILITY,
        header=RELIABILITY_HEADER,
    )
