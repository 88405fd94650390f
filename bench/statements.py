"""The API's write statements from the client's side: CPU per row in the process that sends them.

What the group commit's statements cost the API process per row, apart from HTTP:
encoding a batch's parameters, the round trip, decoding what comes back. Each runs
in batches of ``--batch`` rows on one connection of the API's own pool (its JSON
codecs), alternating over ``--rounds`` rounds, against a baseline in the same run: a
bare multi-row INSERT of the same five columns into a table with no trigger and no
index but its key (five arrays, nothing returned). Figures are medians over the
rounds; CPU is this process's (the client's), wall time includes the server's. The
tables are seeded and analyzed first, as autovacuum keeps a database in use: a plan
cached while ``tasks`` was nearly empty scans it whole, until its first analyze.

- ``insert_tasks``: submits as the API writes them (hookrelay.outbox.store.tasks);
- ``finish_tasks``: completions of those tasks, each with its event and outbox row.

    python -m bench statements [--batch 10] [--batches 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import base64
import statistics
import time
from collections.abc import Awaitable, Callable

import asyncpg

from bench.common import fresh_database, record, server_dsn
from bench.writepath import BARE_TABLE, HOOK
from hookrelay.outbox import ids
from hookrelay.outbox.destinations import host_key
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.models import LIVE_STATUSES, EventId, Task, TaskId
from hookrelay.outbox.store import tasks as store
from hookrelay.outbox.store.pool import create_pool
from hookrelay.outbox.tenants import create_tenant
from tests.harness.procs import master_key

SEED = 20_000  # tasks in the table before anything is measured
BARE_BATCH = """
INSERT INTO bench_bare (id, tenant_id, type, input, callback_url)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[])
"""


def submits(tenant_id: str, n: int) -> list[store.TaskInsert]:
    return [
        store.TaskInsert(
            task_id=TaskId(ids.task_id()),
            tenant_id=tenant_id,
            type="bench",
            input={"n": i},
            callback_url=HOOK,
            metadata={"order": f"A-{i}"},
            timeout_s=None,
            callback_host=host_key(HOOK),
        )
        for i in range(n)
    ]


def completions(task_ids: list[str]) -> list[store.Transition]:
    return [
        store.Transition(
            task_id=t,
            status="succeeded",
            allowed_from=LIVE_STATUSES,
            result={"ok": True},
            event_id=EventId(ids.event_id()),
        )
        for t in task_ids
    ]


async def per_row(
    batches: int, batch: int, one: Callable[[], Awaitable[None]]
) -> tuple[float, float]:
    """(client CPU µs, wall µs) per row of ``batches`` calls of ``one`` (``batch`` rows each)."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(batches):
        await one()
    rows = batches * batch
    return (time.process_time() - cpu0) / rows * 1e6, (time.perf_counter() - wall0) / rows * 1e6


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    dsn = await fresh_database(server_dsn())
    box = SecretBox(base64.urlsafe_b64decode(master_key()))
    conn = await asyncpg.connect(dsn)
    try:
        tenant = (await create_tenant(conn, "bench", box)).id
        await conn.execute(BARE_TABLE)
    finally:
        await conn.close()
    pool = await create_pool(dsn)
    async with pool.acquire() as c:  # the tables of a database in use, with statistics
        for _ in range(SEED // args.batch):
            await store.insert_tasks(c, submits(tenant, args.batch))
        await c.execute("ANALYZE")
    await pool.expire_connections()  # no plan cached before the statistics
    figures: dict[str, list[tuple[float, float]]] = {"bare": [], "insert": [], "finish": []}
    try:
        async with pool.acquire() as c:
            written: list[str] = []

            async def bare() -> None:
                rows = [(ids.task_id(), tenant, "bench", {"n": i}, HOOK) for i in range(args.batch)]
                await c.execute(BARE_BATCH, *(list(col) for col in zip(*rows, strict=True)))

            async def insert() -> None:
                made = await store.insert_tasks(c, submits(tenant, args.batch))
                written.extend(t.id for t in made if isinstance(t, Task))

            async def finish() -> None:
                todo = [written.pop() for _ in range(args.batch)]
                done = await store.finish_tasks(c, completions(todo))
                assert all(t is not None for t in done), "a completion wrote nothing"

            await per_row(20, args.batch, insert)  # warm up: plans cached, pages in memory
            await per_row(20, args.batch, finish)
            await per_row(20, args.batch, bare)
            for _ in range(args.rounds):
                figures["bare"].append(await per_row(args.batches, args.batch, bare))
                figures["insert"].append(await per_row(args.batches, args.batch, insert))
                figures["finish"].append(await per_row(args.batches, args.batch, finish))
    finally:
        await pool.close()
    med = {k: tuple(statistics.median(f[i] for f in v) for i in (0, 1)) for k, v in figures.items()}
    base_cpu, base_wall = med["bare"]
    lines = [
        f"batches of {args.batch} rows, one connection of the API's pool; medians of "
        f"{args.rounds} rounds of {args.batches} batches",
        "",
        "| statement | client CPU µs per row | ÷ bare | wall µs per row | ÷ bare |",
        "|---|---|---|---|---|",
    ]
    names = {
        "bare": "bare multi-row INSERT (the baseline)",
        "insert": "`insert_tasks` (submits)",
        "finish": "`finish_tasks` (completions, with event and outbox row)",
    }
    for key, name in names.items():
        cpu, wall = med[key]
        lines.append(
            f"| {name} | {cpu:.1f} | {cpu / base_cpu:.2f} | {wall:.1f} | {wall / base_wall:.2f} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    record(
        "statements: the write statements' client CPU per row",
        f"python -m bench statements --batch {args.batch} --batches {args.batches} "
        f"--rounds {args.rounds}",
        table,
    )
