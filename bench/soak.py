"""Soak: 100,000 events through a faulty receiver while a dispatcher is killed again and again.

A producer commits completions in batches (the real ``complete_task`` path) while two
dispatchers run: one steady, one killed with SIGKILL every few seconds and restarted.
The receiver answers 500 to 30 % of requests at random and hangs on some past the
HTTP timeout. At the end: delivered, dead-lettered, lost (must be 0), duplicates,
the highest attempt number and the outbox's final size, into docs/operations/reliability.md.

    python -m bench soak [--events 100000] [--fail-rate 0.3] [--kill-every 4]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import random
import signal
import time

import asyncpg

from bench.common import (
    RELIABILITY,
    RELIABILITY_HEADER,
    ReceiverProcess,
    fresh_database,
    outbox_empty,
    record,
    server_dsn,
    server_facts,
    start_dispatcher,
)
from hookrelay.outbox import complete_task
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store.pool import create_pool
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from tests.harness.procs import master_key, service_env


async def produce(dsn: str, box: SecretBox, url: str, n: int, batch: int) -> list[str]:
    pool = await create_pool(dsn, max_size=2)
    events: list[str] = []
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "soak", box)
        for start in range(0, n, batch):
            async with conn.transaction():
                for _ in range(min(batch, n - start)):
                    task, _ = await create_task(conn, tenant.id, NewTask("soak", url))
                    done = await complete_task(conn, task.id, "succeeded", result={"ok": 1})
                    assert done.event_id is not None
                    events.append(done.event_id)
            await asyncio.sleep(0)  # commit in batches, interleaved with the dispatchers
    await pool.close()
    return events


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--fail-rate", type=float, default=0.3)
    p.add_argument("--hang-rate", type=float, default=0.002)
    p.add_argument("--kill-every", type=float, default=4.0, help="mean seconds between kills")
    p.add_argument("--max-attempts", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = random.Random(args.seed)
    dsn = await fresh_database(server_dsn())
    rx = ReceiverProcess(
        "--fail-rate",
        str(args.fail_rate),
        "--hang-rate",
        str(args.hang_rate),
        "--hang-s",
        "5",
        "--seed",
        str(args.seed),
    )
    key = master_key()
    env = service_env(
        dsn,
        key,
        http_timeout_s=2,
        lease_s=5,
        retry_base_s=0.2,
        retry_cap_s=3,
        max_attempts=args.max_attempts,
        poll_interval_s=0.2,
        concurrency=200,
        per_host_concurrency=200,
        batch_size=200,
        breaker_threshold=1_000_000,
    )  # a 30 % failure rate must not open it
    steady = start_dispatcher(env)
    victim = start_dispatcher(env)
    kills = leased_at_kills = 0
    started = time.perf_counter()
    producer = asyncio.create_task(
        produce(dsn, SecretBox(base64.urlsafe_b64decode(key)), rx.url, args.events, 500)
    )
    conn = await asyncpg.connect(dsn)
    try:
        next_kill = time.perf_counter() + rng.expovariate(1 / args.kill_every)
        while True:
            await asyncio.sleep(0.25)
            if time.perf_counter() >= next_kill:
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
                # Both dispatchers' leases: an upper bound on what this kill can duplicate.
                leased_at_kills += await conn.fetchval(
                    "SELECT count(*) FROM outbox WHERE leased_until > now()"
                )
                victim = start_dispatcher(env)
                next_kill = time.perf_counter() + rng.expovariate(1 / args.kill_every)
            if producer.done() and await outbox_empty(conn):
                break
        elapsed = time.perf_counter() - started
        events = producer.result()
        dead = {r["event_id"] for r in await conn.fetch("SELECT event_id FROM dead_letters")}
        attempts = await conn.fetchrow(
            "SELECT count(*) AS n, max(number) AS max_number FROM delivery_attempts"
        )
        twice = await conn.fetchval(
            "SELECT count(*) FROM (SELECT 1 FROM delivery_attempts GROUP BY event_id, number "
            "HAVING count(*) > 1) d"
        )
        outbox_left = await conn.fetchval("SELECT count(*) FROM outbox")
        leased = await conn.fetchval("SELECT count(*) FROM outbox WHERE lease_token IS NOT NULL")
    finally:
        for proc in (steady, victim):
            proc.terminate()
            proc.wait(60)
        await conn.close()
    stats = rx.stop()
    facts = await server_facts(dsn)
    answered: dict[str, int] = stats["answered_2xx"]
    delivered = set(answered) & set(events)
    lost = set(events) - delivered - dead
    duplicates = sum(n - 1 for n in answered.values())
    table = (
        "| figure | value |\n|---|---|\n"
        f"| database | {facts} |\n"
        f"| events committed | {len(events):,} |\n"
        f"| delivered (receiver answered 2xx at least once) | {len(delivered):,} |\n"
        f"| dead-lettered (never answered 2xx in {args.max_attempts} attempts) | "
        f"{len(dead - delivered):,} |\n"
        f"| dead-lettered after a 2xx the killed dispatcher never recorded | "
        f"{len(dead & delivered):,} |\n"
        f"| **lost** | **{len(lost)}** |\n"
        f"| duplicate deliveries (2xx answers read by a dispatcher, beyond the first) | "
        f"{duplicates:,} |\n"
        f"| dispatcher kills (SIGKILL) / rows leased at those kills | {kills} / "
        f"{leased_at_kills:,} |\n"
        f"| hung requests the receiver finished after the dispatcher timed out | "
        f"{stats.get('processed_after_sender_gave_up', 0):,} |\n"
        f"| requests received / answered 500 / hung 5 s | {stats['count']:,} / "
        f"{stats.get('failed', 0):,} / {stats.get('hung', 0):,} |\n"
        f"| attempt rows / highest attempt number | {attempts['n']:,} / "
        f"{attempts['max_number']} |\n"
        f"| attempt numbers written twice | {twice} |\n"
        f"| outbox rows left / still leased | {outbox_left} / {leased} |\n"
        f"| wall time | {elapsed:,.0f} s |\n"
    )
    print(table)
    record(
        "soak",
        f"python -m bench soak --events {args.events} --fail-rate {args.fail_rate} "
        f"--kill-every {args.kill_every:g}",
        table,
        file=RELIABILITY,
        header=RELIABILITY_HEADER,
    )
    if lost or outbox_left or twice or duplicates > leased_at_kills:
        raise SystemExit(1)
