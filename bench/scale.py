"""1, 2 and 4 dispatcher processes on one backlog: throughput, and no attempt made twice.

Each configuration gets a fresh database with the same backlog and a fresh receiver.
The proof of "no double attempt": the receiver saw exactly one request per event,
every event has exactly one attempt row, and the processes' own counters add up.

    python -m bench scale [--events 20000] [--processes 1,2,4]
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import asyncpg

from outbox.crypto import SecretBox

from .backlog import fill
from .common import ReceiverProcess, fresh_database, record, seconds_to_drain, server_dsn
from .procs import ROOT, hookrelay, master_key, service_env


async def run(server: str, key: str, events: int, processes: int) -> dict[str, Any]:
    dsn = await fresh_database(server)
    rx = ReceiverProcess()
    await fill(dsn, SecretBox(base64.urlsafe_b64decode(key)), rx.url, events)
    env = service_env(
        dsn, key, concurrency=200, per_host_concurrency=200, batch_size=500, log_level="INFO"
    )
    logs = [Path(tempfile.mkstemp(suffix=".log")[1]) for _ in range(processes)]
    conn = await asyncpg.connect(dsn)
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
        "| distinct events | attempt rows | highest attempt number |",
        "|---|---|---|---|---|---|---|---|",
    ]
    clean = True
    for r in results:
        rate = float(r["rate"])
        each = " + ".join(f"{n:,}" for n in r["per_process"])
        lines.append(
            f"| {r['processes']} | {rate:,.0f} | {rate / base:.2f} | {each} | {r['received']:,} "
            f"| {r['unique']:,} | {r['attempt_rows']:,} | {r['max_number']} |"
        )
        clean &= (
            r["received"] == r["unique"] == r["attempt_rows"] == args.events
            and r["max_number"] == 1
            and sum(r["per_process"]) == args.events
        )
    lines += ["", f"no event attempted twice in any configuration: {'yes' if clean else 'NO'}", ""]
    table = "\n".join(lines)
    print(table)
    record(
        "scale: dispatcher processes",
        f"python -m bench scale --events {args.events} --processes {args.processes}",
        table,
    )
    if not clean:
        raise SystemExit(1)
