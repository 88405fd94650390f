"""Vacuum blocked: the same drain with and without a session idle in transaction.

An open snapshot pins the xmin horizon, so no dead outbox row can be cleaned up
while it lasts: deleted rows pile up in the heap and in the due-index, and each
claim has to step over them. This measures the drain rate and the dead tuples
left in both cases, in one run, and what VACUUM recovers once the session ends.

    python -m bench vacuum [--rows 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
from typing import Any

import asyncpg

from bench.backlog import SIZES, claim_latency, fill, mb
from bench.common import (
    RELIABILITY,
    RELIABILITY_HEADER,
    ReceiverProcess,
    drain,
    fresh_database,
    percentile,
    record,
    server_dsn,
    server_facts,
)
from hookrelay.outbox.keys.at_rest import SecretBox
from tests.harness.procs import master_key, service_env


async def one(server: str, key: str, url: str, rows: int, pinned: bool) -> dict[str, Any]:
    dsn = await fresh_database(server)
    await fill(dsn, SecretBox(base64.urlsafe_b64decode(key)), url, rows)
    blocker = await asyncpg.connect(dsn)
    if pinned:
        # What a forgotten BEGIN in some other client does: hold a snapshot, then idle.
        await blocker.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await blocker.fetchval("SELECT txid_current()")
    env = service_env(dsn, key, concurrency=200, per_host_concurrency=200, batch_size=500)
    rate, _ = await drain(dsn, env, rows)
    # The empty-but-bloated outbox: how long a claim takes now.
    claims = await claim_latency(dsn, 50, 50)
    await blocker.execute("SELECT pg_stat_force_next_flush()")
    await asyncio.sleep(0.5)
    after = await blocker.fetchrow(SIZES)
    await blocker.close()  # ends the idle transaction, if any
    conn = await asyncpg.connect(dsn)
    await conn.execute("VACUUM outbox")
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await asyncio.sleep(0.5)
    vacuumed = await conn.fetchrow(SIZES)
    await conn.close()
    return {
        "rate": rate,
        "after": after,
        "vacuumed": vacuumed,
        "claim_p99": percentile(claims, 0.99),
    }


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=100_000)
    args = p.parse_args()
    server, key = server_dsn(), master_key()
    rx = ReceiverProcess()
    free = await one(server, key, rx.url, args.rows, pinned=False)
    held = await one(server, key, rx.url, args.rows, pinned=True)
    rx.stop()
    lines = [
        "| run | drained/s | claim p99 on the drained table | dead tuples after drain "
        "| heap / indexes after drain | after VACUUM (session gone) |",
        "|---|---|---|---|---|---|",
    ]
    runs = (("autovacuum free to work", free), ("xmin pinned by an idle transaction", held))
    for name, r in runs:
        a, v = r["after"], r["vacuumed"]
        lines.append(
            f"| {name} | {r['rate']:,.0f} | {r['claim_p99']:.1f} ms | {a['dead']:,} "
            f"| {mb(a['heap'])} / {mb(a['indexes'])} "
            f"| {mb(v['heap'])} / {mb(v['indexes'])}, {v['dead']:,} dead |"
        )
    ratio = float(held["rate"]) / float(free["rate"])
    lines += ["", f"ratio pinned / free = {ratio:.2f}; database: {await server_facts(server)}", ""]
    table = "\n".join(lines)
    print(table)
    record(
        "vacuum blocked by an idle transaction",
        f"python -m bench vacuum --rows {args.rows}",
        table,
        file=RELIABILITY,
        header=RELIABILITY_HEADER,
    )
