"""1, 2 and 4 dispatcher processes on one backlog: throughput, and no attempt made twice.

Each configuration gets a fresh database with the same backlog and a fresh receiver.
The proof of "no double attempt": the receiver saw exactly one request per event,
every event has exactly one attempt row, and the processes' own counters add up.

    python -m bench scale [--events 20000] [--processes 1,2,4]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import asyncpg

from bench.backlog import fill
from bench.common import ReceiverProcess, fresh_database, record, seconds_to_drain, server_dsn
from hookrelay.outbox.keys.at_rest import SecretBox
from tests.harness.procs import ROOT, hookrelay, master_key, service_env


async def pg_busy_ms(conn: asyncpg.Connection) -> tuple[str, float]:
    """Milliseconds PostgreSQL has spent executing statements in this database so far.

    From pg_stat_statements when the server preloads it (the extension is created
    here), else from pg_stat_database.active_time (PostgreSQL 14+), which counts
    the same time per database without the extension.
    """
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        ms = await conn.fetchval(
            "SELECT COALESCE(sum(total_exec_time), 0) FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return "pg_stat_statements", float(ms)
    except asyncpg.PostgresError:
        await conn.execute("SELECT pg_stat_force_next_flush()")
        ms = await conn.fetchval(
            "SELECT active_time FROM pg_stat_database WHERE datname = current_database()"
        )
        return "pg_stat_database.active_time", float(ms)


async def run(server: str, key: str, events: int, processes: int) -> dict[str, Any]:
    dsn = await fresh_database(server)
    rx = ReceiverProcess()
    await fill(dsn, SecretBox(base64.urlsafe_b64decode(key)), rx.url, events)
    env = service_env(
        dsn, key, concurrency=200, per_host_concurrency=200, batch_size=500, log_level="INFO"
    )
    logs = [Path(tempfile.mkstemp(suffix=".log")[1]) for _ in range(processes)]
    conn = await asyncpg.connect(dsn)
    source, busy_before = await pg_busy_ms(conn)
    procs = [
        subprocess.Popen(
            hookrelay("dispatch"),
            env=env,
            cwd=ROOT,
            stderr=log.open("wb"),
        )
        for log in logs
    ]
    try:
        rate = events / await seconds_to_drain(conn)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
    await asyncio.sleep(1)  # statistics are flushed by each backend within a second
    _, busy_after = await pg_busy_ms(conn)
    attempts = await conn.fetchrow(
        "SELECT count(*) AS rows, count(DISTINCT event_id) AS events, max(number) AS max_number "
        "FROM delivery_attempts"
    )
    await conn.close()
    stats = rx.stop()
    delivered = []
    for log in logs:
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("msg") == "dispatcher stopped":
                delivered.append(int(entry["counters"].get("delivered", 0)))
    return {
        "processes": processes,
        "rate": rate,
        "per_process": delivered,
        "received": stats["count"],
        "unique": stats["unique"],
        "attempt_rows": attempts["rows"],
        "attempted_events": attempts["events"],
        "max_number": attempts["max_number"],
        "pg_ms_per_1000": (busy_after - busy_before) / events * 1000,
        "pg_source": source,
    }


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=20000)
    p.add_argument("--processes", default="1,2,4")
    args = p.parse_args()
    server, key = server_dsn(), master_key()
    results = [await run(server, key, args.events, int(n)) for n in args.processes.split(",")]
    base = float(results[0]["rate"])
    lines = [
        "| dispatchers | delivered/s | vs one | delivered by each | requests received "
        "| distinct events | attempt rows | highest attempt number "
        "| PostgreSQL ms per 1,000 deliveries |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    clean = True
    for r in results:
        rate = float(r["rate"])
        each = " + ".join(f"{n:,}" for n in r["per_process"])
        lines.append(
            f"| {r['processes']} | {rate:,.0f} | {rate / base:.2f} | {each} | {r['received']:,} "
            f"| {r['unique']:,} | {r['attempt_rows']:,} | {r['max_number']} "
            f"| {float(r['pg_ms_per_1000']):,.0f} |"
        )
        clean &= (
            r["received"] == r["unique"] == r["attempt_rows"] == args.events
            and r["max_number"] == 1
            and sum(r["per_process"]) == args.events
        )
    pg_ms = float(results[0]["pg_ms_per_1000"])
    lines += [
        "",
        f"no event attempted twice in any configuration: {'yes' if clean else 'NO'}",
        "",
        f"PostgreSQL time from {results[0]['pg_source']}. At {pg_ms:,.0f} ms of PostgreSQL "
        f"time per 1,000 deliveries, one PostgreSQL core feeds about "
        f"{1_000_000 / pg_ms:,.0f} deliveries/s, which takes "
        f"{1_000_000 / pg_ms / base:.1f} dispatcher processes at the one-process rate above.",
        "",
    ]
    table = "\n".join(lines)
    print(table)
    record(
        "scale: dispatcher processes",
        f"python -m bench scale --events {args.events} --processes {args.processes}",
        table,
    )
    if not clean:
        raise SystemExit(1)
