"""A deep backlog: 1,000,000 due outbox rows, drained by one dispatcher.

Reports claim latency at full depth (the dispatcher's own CLAIM_BATCH, claimed
and released again so the depth stays put), the drain rate against the rate on
an otherwise empty table measured in the same run, the dispatcher's peak RSS,
and the outbox's size full, drained, and after VACUUM (bloat stays bounded).

    python -m bench backlog [--rows 1000000] [--baseline-rows 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import time
import uuid
from typing import Any

import asyncpg

from bench.common import (
    ReceiverProcess,
    drain,
    fresh_database,
    percentile,
    record,
    server_dsn,
    server_facts,
)
from hookrelay.outbox import complete_task
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store import changes, delivery
from hookrelay.outbox.store.pool import create_pool
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from tests.harness.procs import master_key, service_env

# Rows are made in SQL, but shaped exactly like the ones complete_task writes:
# a succeeded task carrying its event id, and the event's real body.
FILL_TASKS = """
INSERT INTO tasks (id, tenant_id, type, status, callback_url, completed_at, event_id,
                   delivery_status)
SELECT 'task_bk' || g, $1, 'bench', 'succeeded', $2, now(), 'evt_bk' || g, 'pending'
  FROM generate_series($3::int, $4::int) g
"""
FILL_EVENTS = """
INSERT INTO events (event_id, tenant_id, task_id, event_type, body)
SELECT 'evt_bk' || g, $1, 'task_bk' || g, 'task.succeeded', $4
  FROM generate_series($2::int, $3::int) g
"""
FILL_OUTBOX = """
INSERT INTO outbox (event_id, tenant_id, task_id, event_type, callback_url, host)
SELECT 'evt_bk' || g, $1, 'task_bk' || g, 'task.succeeded', $2, '127.0.0.1'
  FROM generate_series($3::int, $4::int) g
"""
SIZES = """
SELECT pg_table_size('outbox') AS heap, pg_indexes_size('outbox') AS indexes,
       (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox') AS dead
"""


async def fill(dsn: str, box: SecretBox, url: str, n: int) -> None:
    pool = await create_pool(dsn, max_size=2)
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "bench", box)
        task, _ = await create_task(conn, tenant.id, NewTask("bench", url))
        await complete_task(conn, task.id, "succeeded", result={"ok": True})
        body = await conn.fetchval("SELECT body FROM events")
        await conn.execute("DELETE FROM outbox; DELETE FROM events")
        for start in range(1, n + 1, 100_000):
            end = min(n, start + 99_999)
            await conn.execute(FILL_TASKS, tenant.id, url, start, end)
            await conn.execute(FILL_EVENTS, tenant.id, start, end, body)
            await conn.execute(FILL_OUTBOX, tenant.id, url, start, end)
        # The tasks' changes are numbered for the status streams now, in the set-up,
        # as the API would at each commit: not by a sweeper in the middle of a drain.
        await changes.number_pending(conn)
        await conn.execute("VACUUM ANALYZE outbox")
        await conn.execute("VACUUM ANALYZE events")
        await conn.execute("VACUUM ANALYZE tasks")
    await pool.close()


async def claim_latency(dsn: str, rounds: int, batch: int) -> list[float]:
    """ms per claim of ``batch`` rows at full depth (finding the lane, then leasing from it);
    each claim is released again."""
    conn = await asyncpg.connect(dsn)
    out = []
    try:
        for _ in range(rounds):
            token = uuid.uuid4()
            started = time.perf_counter()
            [lane] = await delivery.due_lanes(conn, upto=batch)
            rows = await delivery.claim_lanes(
                conn,
                lanes=[(lane.host, lane.tenant_id, batch)],
                lease_s=30.0,
                owner="bench",
                token=token,
            )
            out.append((time.perf_counter() - started) * 1000)
            await delivery.release_leases(conn, ids=[e.id for e in rows], token=token)
    finally:
        await conn.close()
    return out


async def sizes(dsn: str, vacuum: bool = False) -> asyncpg.Record:
    conn = await asyncpg.connect(dsn)
    try:
        if vacuum:
            await conn.execute("VACUUM outbox")
        await conn.execute("SELECT pg_stat_force_next_flush()")
        await asyncio.sleep(0.5)  # let the statistics collector catch up
        row: asyncpg.Record = await conn.fetchrow(SIZES)
        return row
    finally:
        await conn.close()


def mb(n: int) -> str:
    return f"{n / 1_048_576:,.1f} MB"


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--baseline-rows", type=int, default=50_000)
    args = p.parse_args()
    server = server_dsn()
    rx = ReceiverProcess()
    key = master_key()
    box = SecretBox(base64.urlsafe_b64decode(key))
    env_extra: dict[str, Any] = {"concurrency": 200, "per_host_concurrency": 200, "batch_size": 500}

    small = await fresh_database(server)
    await fill(small, box, rx.url, args.baseline_rows)
    empty_rate, _ = await drain(small, service_env(small, key, **env_extra), args.baseline_rows)

    big = await fresh_database(server)
    t0 = time.perf_counter()
    await fill(big, box, rx.url, args.rows)
    fill_s = time.perf_counter() - t0
    full = await sizes(big)
    # 50 is the dispatcher's usual refill (a quarter of its 200 slots); 500 its largest claim.
    claims = {b: await claim_latency(big, 200, b) for b in (50, 200, 500)}
    deep_rate, rss = await drain(big, service_env(big, key, **env_extra), args.rows)
    drained = await sizes(big)
    vacuumed = await sizes(big, vacuum=True)
    stats = rx.stop()

    ratio = deep_rate / empty_rate
    table = (
        "| figure | value |\n|---|---|\n"
        f"| database | {await server_facts(big)} |\n"
        f"| backlog rows | {args.rows:,} (filled in {fill_s:.0f} s) |\n"
        + "".join(
            f"| claim of {b} rows at full depth, p50 / p99 | "
            f"{percentile(c, 0.5):.1f} ms / {percentile(c, 0.99):.1f} ms |\n"
            for b, c in claims.items()
        )
        + f"| drain rate, {args.rows:,} backlog | {deep_rate:,.0f} delivered/s |\n"
        f"| drain rate, {args.baseline_rows:,} rows on an empty table | "
        f"{empty_rate:,.0f} delivered/s |\n"
        f"| ratio = deep / empty-table rate | {ratio:.2f} |\n"
        f"| dispatcher peak RSS | {rss:,.0f} MB |\n"
        f"| outbox full: heap / indexes | {mb(full['heap'])} / {mb(full['indexes'])} |\n"
        f"| outbox drained: heap / indexes / dead tuples | {mb(drained['heap'])} / "
        f"{mb(drained['indexes'])} / {drained['dead']:,} |\n"
        f"| outbox after VACUUM: heap / indexes / dead tuples | {mb(vacuumed['heap'])} / "
        f"{mb(vacuumed['indexes'])} / {vacuumed['dead']:,} |\n"
        f"| requests received | {stats['count']:,} ({stats['unique']:,} distinct events) |\n"
    )
    print(table)
    record(
        "backlog: one million due rows",
        f"python -m bench backlog --rows {args.rows} --baseline-rows {args.baseline_rows}",
        table,
    )
