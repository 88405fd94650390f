"""What a LISTEN connection costs the server: its CPU per NOTIFY with 1, 2 and 3 listening backends.

PostgreSQL signals every backend that listens in a database at each notifying
commit, whatever its channels; each wakes and reads the notification queue. One
connection sends ``--notifies`` NOTIFYs (one per commit) while ``k`` connections
listen on the channel; the figure is the CPU of every PostgreSQL process of the
server (read from /proc: the server must run on this machine) per NOTIFY, and its
ratio to one listener's in the same run. Why an API process listens on one
connection, not three (hookrelay.outbox.store.listener).

    python -m bench listeners [--notifies 6000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from pathlib import Path

import asyncpg

from bench.common import fresh_database, record, server_dsn

CHANNEL = "hookrelay_bench_listeners"


def server_cpu_s() -> float:
    """CPU seconds of every ``postgres`` process on this machine."""
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, _, rest = stat.partition(") ")
        if not name.endswith("(postgres"):
            continue
        fields = rest.split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


async def per_notify(dsn: str, listeners: int, notifies: int) -> float:
    """The server's CPU µs per NOTIFY with ``listeners`` backends listening."""
    heard = 0

    def hear(*_: object) -> None:
        nonlocal heard
        heard += 1

    conns = [await asyncpg.connect(dsn) for _ in range(listeners)]
    sender = await asyncpg.connect(dsn)
    try:
        for conn in conns:
            await conn.add_listener(CHANNEL, hear)
        await asyncio.sleep(0.5)
        cpu0 = server_cpu_s()
        for i in range(notifies):
            await sender.execute(f"SELECT pg_notify('{CHANNEL}', $1)", str(i))
        while heard < notifies * listeners:
            await asyncio.sleep(0.01)
        return (server_cpu_s() - cpu0) / notifies * 1e6
    finally:
        for conn in (*conns, sender):
            await conn.close()


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--notifies", type=int, default=6000)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    dsn = await fresh_database(server_dsn())
    figures: dict[int, list[float]] = {1: [], 2: [], 3: []}
    for _ in range(args.rounds):
        for k in figures:
            figures[k].append(await per_notify(dsn, k, args.notifies))
    one = statistics.median(figures[1])
    lines = [
        f"{args.notifies} NOTIFYs, one per commit, median of {args.rounds} rounds",
        "",
        "| listening backends | server CPU µs per NOTIFY | ÷ one listener |",
        "|---|---|---|",
    ]
    for k, runs in figures.items():
        cpu = statistics.median(runs)
        lines.append(f"| {k} | {cpu:.0f} | {cpu / one:.2f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    record(
        "listeners: the server's CPU per NOTIFY by listening backends",
        f"python -m bench listeners --notifies {args.notifies} --rounds {args.rounds}",
        table,
    )
