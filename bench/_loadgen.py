"""Closed-loop HTTP load generator, run as its own process so it never shares a core's loop.

    python -m bench._loadgen URL --method GET|POST [--body JSON] [--header K:V]
                             [--paths FILE] [--auths FILE] [--concurrency C] [--seconds S]

``--paths`` gives one path per line, cycled through (e.g. one task id each);
``--auths`` one ``Authorization`` value per line, cycled through per request (several
tenants from one generator). Prints
one JSON object: requests, errors, status counts, req/s, p50/p99 latency in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from collections import Counter
from pathlib import Path

import aiohttp

from bench.common import percentile


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--method", default="GET")
    p.add_argument("--body", default=None)
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--paths", default=None)
    p.add_argument("--auths", default=None)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    args = p.parse_args()
    headers = dict(h.split(":", 1) for h in args.header)
    paths = Path(args.paths).read_text().split() if args.paths else [""]
    cycle = itertools.cycle(paths)
    auths = Path(args.auths).read_text().splitlines() if args.auths else []
    auth_cycle = itertools.cycle(auths) if auths else None
    data = args.body.encode() if args.body is not None else None
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    errors = 0
    warmup = 0  # requests answered before measuring began (for CPU per request)
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        measuring = False
        stop_at = float("inf")

        async def worker() -> None:
            nonlocal errors, warmup
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                sent = headers
                if auth_cycle is not None:
                    sent = {**headers, "Authorization": next(auth_cycle)}
                try:
                    async with session.request(
                        args.method, args.url + next(cycle), data=data, headers=sent
                    ) as r:
                        await r.read()
                        status = r.status
                except aiohttp.ClientError:
                    if measuring:
                        errors += 1
                    continue
                if measuring:
                    latencies.append((time.perf_counter() - started) * 1000)
                    statuses[status] += 1
                else:
                    warmup += 1

        workers = [asyncio.create_task(worker()) for _ in range(args.concurrency)]
        await asyncio.sleep(args.warmup)  # connections open, caches warm
        measuring, t0 = True, time.perf_counter()
        stop_at = t0 + args.seconds
        await asyncio.gather(*workers)
        elapsed = time.perf_counter() - t0

    def pct(q: float) -> float:
        return percentile(latencies, q) if latencies else 0.0

    print(
        json.dumps(
            {
                "requests": len(latencies),
                "warmup_requests": warmup,
                "errors": errors,
                "statuses": dict(statuses),
                "rps": len(latencies) / elapsed,
                "p50_ms": pct(0.5),
                "p99_ms": pct(0.99),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
