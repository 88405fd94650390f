"""Ordered delivery's cost: one host's backlog drained unordered, then with ordering keys.

The same backlog (one tenant, one host, default settings) is drained by one
``hookrelay dispatch`` three ways, each on a fresh database, in one run: no
ordering key (the baseline), the events spread over 200 keys, and over 20 keys.
A key sends one webhook at a time, so with k keys at most k are in flight to the
host, and each next one waits for its predecessor's outcome to be written (the
recorder's batch) and claimed: the cost is the rate with keys ÷ the rate without.
Rates are steady state (after the first 5 % of attempts).

The keyed backlogs are queued as the write path queues them (one queue per key in
commit order, only each key's head due, ``ordering_keys`` counting what waits),
written by set-based SQL here so that filling them takes seconds.

    python -m bench ordered [--events 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64

import asyncpg

from bench.backlog import fill
from bench.common import ReceiverProcess, fresh_database, record, server_dsn
from bench.sched import drain_counted
from hookrelay.outbox.keys.at_rest import SecretBox
from tests.harness.procs import master_key, service_env

KEYED = """
WITH placed AS (
    SELECT id, 'key-' || (id % $1) AS k,
           row_number() OVER (PARTITION BY id % $1 ORDER BY id) AS seq
      FROM outbox
), queued AS (
    UPDATE outbox o
       SET ordering_key = p.k, ordering_seq = p.seq,
           next_attempt_at = CASE WHEN p.seq = 1 THEN o.next_attempt_at ELSE 'infinity' END
      FROM placed p WHERE o.id = p.id
    RETURNING o.task_id, o.tenant_id, o.ordering_key
), tasks AS (
    INSERT INTO task_ordering_keys (task_id, tenant_id, ordering_key)
    SELECT task_id, tenant_id, ordering_key FROM queued
)
INSERT INTO ordering_keys (tenant_id, ordering_key, last_seq, pending)
SELECT tenant_id, ordering_key, count(*), count(*) FROM queued GROUP BY 1, 2
"""


async def backlog(server: str, box: SecretBox, url: str, n: int, keys: int) -> str:
    dsn = await fresh_database(server)
    await fill(dsn, box, url, n)
    if keys:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(KEYED, keys)
            await conn.execute("VACUUM ANALYZE outbox")
        finally:
            await conn.close()
    return dsn


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=10000)
    args = p.parse_args()
    server, key = server_dsn(), master_key()
    box = SecretBox(base64.urlsafe_b64decode(key))
    rx = ReceiverProcess()
    rates: dict[int, float] = {}
    cpu: dict[int, float] = {}
    try:
        for keys in (0, 200, 20):
            dsn = await backlog(server, box, rx.url, args.events, keys)
            env = service_env(dsn, key, log_level="INFO")
            rates[keys], _, cpu[keys] = await drain_counted(dsn, env, args.events, after=0.05)
    finally:
        rx.stop()
    base = rates[0]
    rows = [
        f"| {'no ordering key' if k == 0 else f'{k} ordering keys'} | {rates[k]:,.0f}/s | "
        f"{rates[k] / base:.2f} | {cpu[k] * 1e6:,.0f} µs |"
        for k in (0, 200, 20)
    ]
    table = (
        f"{args.events:,} events to one host, one dispatcher at default settings "
        "(20 in flight to a host), steady state.\n\n"
        "| backlog | drain | ÷ no key, same run | dispatcher CPU per delivery |\n"
        "|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    print(table)
    record("ordered", f"python -m bench ordered --events {args.events}", table)


if __name__ == "__main__":
    asyncio.run(main())
