"""Open-loop load generator: POSTs at a steady rate, in its own process.

    python -m bench._rategen URL --rate R --seconds S [--paths FILE] [--body JSON]
                             [--header K:V] [--stamp] [--connections N] [--send-times FILE]

Request i is sent at i / R seconds from the start whatever the earlier ones are
doing (an open loop: a slow server gets a queue, as it would from real traffic).
``--paths`` gives one path per line appended to URL, one per request; ``--stamp``
sends ``{"timestamp": <now, ISO-8601>}`` as the body, so that bench/_receiver.py
measures a bare POST's send→receipt the way it measures a webhook's commit→receipt.
``--connections`` caps the session's connections (500 by default; bench receipt's open
loop uses 100, as a user's client pool would): past it, a request waits for a free
connection, and that wait counts in its latency, which runs from just before the
request is handed to the session. ``--send-times FILE`` writes those instants (unix
seconds) by path, for the receiver's arrival times to be matched with.
Prints one JSON object: sent, offered rate, how many left late (the generator
could not keep up), statuses, errors, and p50/p99/max of its own request latency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from bench.common import percentile
from hookrelay.service.server.event_loop import run


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--paths", default=None)
    p.add_argument("--body", default="{}")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--stamp", action="store_true")
    p.add_argument("--connections", type=int, default=500)
    p.add_argument("--send-times", default=None)
    args = p.parse_args()
    send_times: dict[str, float] = {}
    headers = {"Content-Type": "application/json", **dict(h.split(":", 1) for h in args.header)}
    n = int(args.rate * args.seconds)
    paths = Path(args.paths).read_text().split()[:n] if args.paths else [""] * n
    n = len(paths)
    body = args.body.encode()
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    errors = late = 0
    # As many connections as a busy client would open; past that, requests queue here.
    connector = aiohttp.TCPConnector(limit=args.connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(path: str) -> None:
            nonlocal errors
            data = body
            if args.stamp:
                now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
                data = json.dumps({"timestamp": now}, separators=(",", ":")).encode()
            started = time.perf_counter()
            if args.send_times:
                send_times[path] = time.time()
            try:
                async with session.post(args.url + path, data=data, headers=headers) as r:
                    await r.read()
                    statuses[r.status] += 1
            except aiohttp.ClientError:
                errors += 1
                return
            latencies.append((time.perf_counter() - started) * 1000)

        pending = []
        t0 = time.perf_counter()
        for i, path in enumerate(paths):
            delay = i / args.rate - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -0.005:
                late += 1
            pending.append(asyncio.create_task(one(path)))
        await asyncio.gather(*pending)
        elapsed = time.perf_counter() - t0
    if args.send_times:
        Path(args.send_times).write_text(json.dumps(send_times))

    def pct(q: float) -> float:
        return percentile(latencies, q) if latencies else 0.0

    print(
        json.dumps(
            {
                "sent": n,
                "offered_per_s": n / elapsed,
                "late": late,
                "statuses": dict(statuses),
                "errors": errors,
                "p50_ms": pct(0.5),
                "p99_ms": pct(0.99),
                "max_ms": max(latencies, default=0.0),
            }
        )
    )


if __name__ == "__main__":
    run(main())
