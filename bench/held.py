"""Claim cost with rows held behind an open circuit: does it grow with what is held?

Two databases, the same busy lane in each (``--due`` rows due to a healthy host):
one also holds ``--held`` rows for a host whose circuit is open (held once, as
the dispatcher's first round does), the other none. Each claim round is the
dispatcher's own: find the due lanes, then lease ``--batch`` rows from the busy
lane, which are then deleted as a delivery deletes them (``--due`` must cover
``--rounds`` x ``--batch``).

    python -m bench held [--held 200000] [--due 20000] [--rounds 300] [--batch 20]
"""

from __future__ import annotations

import argparse
import time
import uuid

import asyncpg

from bench.common import fresh_database, percentile, record, server_dsn, server_facts
from hookrelay.outbox.dispatch.scheduler import HOLD_S
from hookrelay.outbox.store import delivery

FILL = """
WITH stored AS (
    INSERT INTO events (event_id, tenant_id, task_id, event_type, body)
    SELECT $1 || g, 'ten_bench', 'task_' || $1 || g, 'task.succeeded', repeat('x', 600)
      FROM generate_series(1, $3::int) g
)
INSERT INTO outbox (event_id, tenant_id, task_id, event_type, callback_url, host)
SELECT $1 || g, 'ten_bench', 'task_' || $1 || g, 'task.succeeded', 'https://' || $2 || '/hook',
       $2
  FROM generate_series(1, $3::int) g
"""


async def claim_rounds(dsn: str, held: int, due: int, rounds: int, batch: int) -> list[float]:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO tenants (id, name, api_key_hash) VALUES ('ten_bench', 'b', 'h')"
        )
        await conn.execute(FILL, "up", "up.example", due)
        if held:
            await conn.execute(FILL, "down", "down.example", held)
            await conn.execute(
                "INSERT INTO destinations (host, state, consecutive_failures, probe_at) "
                "VALUES ('down.example', 'open', 10, now() + interval '1 hour')"
            )
            await delivery.hold_lanes(conn, hosts=["down.example"], hold_s=HOLD_S)
        await conn.execute("VACUUM ANALYZE outbox")
        out = []
        for _ in range(rounds):
            token = uuid.uuid4()
            started = time.perf_counter()
            lanes = await delivery.due_lanes(conn, upto=batch)
            rows = await delivery.claim_lanes(
                conn,
                lanes=[(x.host, x.tenant_id, batch) for x in lanes if x.state == "closed"],
                lease_s=30.0,
                owner="bench",
                token=token,
            )
            out.append((time.perf_counter() - started) * 1000)
            assert len(rows) == batch and all(e.host == "up.example" for e in rows)
            # Delivered, as far as the outbox is concerned: the rows leave it.
            await conn.execute(
                "DELETE FROM outbox WHERE id = ANY($1::bigint[])", [e.id for e in rows]
            )
        return out
    finally:
        await conn.close()


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--held", type=int, default=200_000)
    p.add_argument("--due", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--batch", type=int, default=20)
    args = p.parse_args()
    server = server_dsn()
    facts = await server_facts(server)
    base = await claim_rounds(await fresh_database(server), 0, args.due, args.rounds, args.batch)
    rows = [("0", base)]
    if args.held:
        held = await claim_rounds(
            await fresh_database(server), args.held, args.due, args.rounds, args.batch
        )
        rows.append((f"{args.held:,}", held))
    table = (
        f"{facts}; {args.due:,} rows due in the busy lane; a claim round = due_lanes + "
        f"claim_lanes of {args.batch} rows\n\n"
        "| rows held behind an open circuit | claim p50 ms | claim p99 ms |\n|---|---|---|\n"
        + "".join(
            f"| {name} | {percentile(v, 0.5):.2f} | {percentile(v, 0.99):.2f} |\n"
            for name, v in rows
        )
    )
    if args.held:
        ratio = percentile(rows[1][1], 0.99) / percentile(base, 0.99)
        table += f"| ratio p99 (held / none) | {ratio:.2f} | |\n"
    print(table)
    record(
        f"held: {args.batch}-row claims, {args.due:,} due, {args.held:,} held",
        f"python -m bench held --held {args.held} --due {args.due} --rounds {args.rounds} "
        f"--batch {args.batch}",
        table,
    )
