"""How the outbox's rows are rewritten while one dispatcher drains a backlog: HOT or not.

A claim writes the lease (leased_until, lease_token, lease_owner) into each row
it takes. An UPDATE is HOT (heap-only: no new index entries, the new version in
the same page) only if no indexed column changes and the page has room. This
drains ``--events`` rows to one host at default settings and reads the table's
counters from pg_stat_user_tables, with PostgreSQL's busy time per 1,000
deliveries (pg_stat_database.active_time) and the drain rate.

    python -m bench hotrow [--events 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64

import asyncpg

from bench.backlog import fill
from bench.common import ReceiverProcess, fresh_database, record, server_dsn, server_facts
from bench.sched import drain_counted
from hookrelay.outbox.keys.at_rest import SecretBox
from tests.harness.procs import master_key, service_env

COUNTERS = """
SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
  FROM pg_stat_user_tables WHERE relname = 'outbox'
"""
ACTIVE_MS = "SELECT active_time FROM pg_stat_database WHERE datname = current_database()"


async def stats(conn: asyncpg.Connection) -> tuple[asyncpg.Record, float]:
    # The dispatcher's backends report their counts when they end, and
    # reports reach a reader within a second or so: ask until they are in.
    await asyncio.sleep(1.5)
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return await conn.fetchrow(COUNTERS), float(await conn.fetchval(ACTIVE_MS) or 0.0)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=20000)
    args = p.parse_args()
    server, key = server_dsn(), master_key()
    rx = ReceiverProcess()
    try:
        dsn = await fresh_database(server)
        await fill(dsn, SecretBox(base64.urlsafe_b64decode(key)), rx.url, args.events)
        conn = await asyncpg.connect(dsn)
        facts = await server_facts(dsn)
        before, active0 = await stats(conn)
        rate, counters, _ = await drain_counted(
            dsn, service_env(dsn, key, log_level="INFO"), args.events
        )
        after, active1 = await stats(conn)
        fillfactor = await conn.fetchval(
            "SELECT coalesce((SELECT option_value FROM pg_options_to_table(reloptions)"
            " WHERE option_name = 'fillfactor'), '100') FROM pg_class WHERE relname = 'outbox'"
        )
        indexes = await conn.fetch(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'outbox' ORDER BY indexname"
        )
        await conn.close()
    finally:
        rx.stop()
    upd = after["n_tup_upd"] - before["n_tup_upd"]
    hot = after["n_tup_hot_upd"] - before["n_tup_hot_upd"]
    deleted = after["n_tup_del"] - before["n_tup_del"]
    delivered = counters.get("delivered", 0)
    pg_ms = (active1 - active0) / max(1, delivered) * 1000
    table = (
        f"{facts}; outbox fillfactor {fillfactor}; indexes on outbox:\n\n"
        + "".join(f"- `{r['indexdef'].split(' USING ')[1]}`\n" for r in indexes)
        + "\n| figure | value |\n|---|---|\n"
        f"| events drained, one host, default settings | {args.events:,} |\n"
        f"| delivered/s | {rate:,.0f} |\n"
        f"| outbox rows updated (claims) | {upd:,} |\n"
        f"| of which HOT | {hot:,} ({hot / max(1, upd):.0%}) |\n"
        f"| outbox rows deleted (delivered) | {deleted:,} |\n"
        f"| PostgreSQL ms per 1,000 deliveries (active_time) | {pg_ms:,.0f} |\n"
    )
    print(table)
    record(
        "hotrow: how claims rewrite the outbox row",
        f"python -m bench hotrow --events {args.events}",
        table,
    )
