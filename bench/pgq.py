"""The baseline dispatcher: PgQueuer + httpx, written the way PgQueuer's docs show.

One entrypoint, ``webhook``, whose job payload is the exact body to POST; the
handler POSTs it with one shared ``httpx.AsyncClient`` and raises on a non-2xx
answer. Its ``concurrency_limit`` is hookrelay's per-host cap, the setting the
docs give for not overwhelming one external API. PgQueuer is in the ``bench``
extra only: it is the yardstick, not part of hookrelay.

    python -m bench pgq [--jobs 5000] [--concurrency 20]
    python -m bench.pgq --worker DSN URL N CONCURRENCY      (one worker process)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
ENTRYPOINT = "webhook"


async def enqueue(dsn: str, body: bytes, n: int) -> None:
    """Install PgQueuer's tables in ``dsn`` and enqueue ``n`` webhook jobs."""
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn)
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        for start in range(0, n, 1000):
            count = min(1000, n - start)
            await queries.enqueue([ENTRYPOINT] * count, [body] * count, [0] * count)
    finally:
        await conn.close()


async def worker(dsn: str, url: str, n: int, concurrency: int) -> None:
    """Drain the queue; prints ``{"rate": jobs/s from the first job to the last}``."""
    import httpx
    from pgqueuer import QueueManager
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    conn = await asyncpg.connect(dsn)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    stamps: list[float] = []
    async with httpx.AsyncClient(timeout=15.0) as client:

        @qm.entrypoint(ENTRYPOINT, concurrency_limit=concurrency)
        async def deliver(job: Job) -> None:
            r = await client.post(
                url, content=job.payload, headers={"content-type": "application/json"}
            )
            r.raise_for_status()
            stamps.append(time.perf_counter())

        await qm.run(mode=QueueExecutionMode.drain)
    await conn.close()
    done = len(stamps)
    elapsed = stamps[-1] - stamps[0] if done > 1 else float("nan")
    print(json.dumps({"rate": (done - 1) / elapsed, "done": done}))


def run_worker(dsn: str, url: str, n: int, concurrency: int) -> float:
    """One PgQueuer worker process draining ``n`` jobs: its delivered/s."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.pgq", "--worker", dsn, url, str(n), str(concurrency)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"PgQueuer worker failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["done"] != n:
        raise RuntimeError(f"PgQueuer delivered {result['done']} of {n}")
    return float(result["rate"])


async def pgq_rate(server: str, url: str, body: bytes, n: int, concurrency: int) -> float:
    """Fresh database, ``n`` jobs, one worker process: delivered/s."""
    from bench.common import fresh_database

    dsn = await fresh_database(server)
    await enqueue(dsn, body, n)
    return await asyncio.to_thread(run_worker, dsn, url, n, concurrency)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--worker", nargs=4, metavar=("DSN", "URL", "N", "CONCURRENCY"))
    args = p.parse_args()
    if args.worker:
        dsn, url, n, c = args.worker
        await worker(dsn, url, int(n), int(c))
        return
    from bench.common import ReceiverProcess, server_dsn

    rx = ReceiverProcess()
    try:
        rate = await pgq_rate(
            server_dsn(), rx.url, b'{"type":"bench"}', args.jobs, args.concurrency
        )
    finally:
        rx.stop()
    print(f"PgQueuer + httpx, {args.jobs} jobs, concurrency {args.concurrency}: {rate:,.0f}/s")


if __name__ == "__main__":
    asyncio.run(main())
