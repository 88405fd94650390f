"""Benchmark receiver: records arrival minus the event's commit timestamp, answers 204.

    python -m bench._receiver PORT OUT [--fail-rate F] [--hang-rate H] [--hang-s S] [--seed N]
                                       [--commit-times] [--arrivals]

A request to ``/hook?warm`` is answered and counted but not measured (warm-ups).
With ``--fail-rate`` it answers 500 to that share of requests at random; with
``--hang-rate`` it holds that share open for ``--hang-s`` seconds before answering.
On SIGTERM it writes ``{"count", "unique", "latencies_ms", "answered_2xx", "failed",
"hung", "processed_after_sender_gave_up"}`` to OUT, where ``answered_2xx`` maps each
event id to the 2xx answers its sender was still there to read. With
``--commit-times`` it also writes ``committed_at``: each measured event's commit
time (unix seconds), in the order of ``latencies_ms``. With ``--arrivals`` it writes
``arrivals``: each measured webhook's arrival time (unix seconds) by the id of its task,
for a load generator that knows when it sent each task's completion (bench receipt's
open loop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import time
from collections import Counter
from datetime import datetime

from aiohttp import web

TIMESTAMP = re.compile(rb'"timestamp":"([^"]+)"')
TASK_ID = re.compile(rb'"data":\{"id":"([^"]+)"')


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("out")
    p.add_argument("--fail-rate", type=float, default=0.0)
    p.add_argument("--hang-rate", type=float, default=0.0)
    p.add_argument("--hang-s", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None)
    # Several loopback addresses (127.0.0.1,127.0.0.2,...): as many destination hosts.
    p.add_argument("--hosts", default="127.0.0.1")
    p.add_argument("--commit-times", action="store_true")
    p.add_argument("--arrivals", action="store_true")
    args = p.parse_args()
    arrivals: dict[str, float] = {}
    rng = random.Random(args.seed)
    latencies: list[float] = []
    committed: list[float] = []
    seen: set[str] = set()
    answered: Counter[str] = Counter()
    faults: Counter[str] = Counter()

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        now = time.time()
        event_id = request.headers.get("webhook-id", "")
        seen.add(event_id)
        m = TIMESTAMP.search(body)
        if m and "warm" not in request.query:  # ?warm: a warm-up, not measured
            sent = datetime.fromisoformat(m.group(1).decode().replace("Z", "+00:00"))
            latencies.append((now - sent.timestamp()) * 1000)
            if args.commit_times:
                committed.append(sent.timestamp())
            if args.arrivals and (task := TASK_ID.search(body)):
                arrivals.setdefault(task.group(1).decode(), now)
        if args.hang_rate and rng.random() < args.hang_rate:
            faults["hung"] += 1
            await asyncio.sleep(args.hang_s)
            if request.transport is None or request.transport.is_closing():
                # The sender timed out and hung up: it never sees this answer, so
                # it will try again. A receiver that acted anyway sees a duplicate.
                faults["processed_after_sender_gave_up"] += 1
                return web.Response(status=204)
        if args.fail_rate and rng.random() < args.fail_rate:
            faults["failed"] += 1
            return web.Response(status=500)
        answered[event_id] += 1
        return web.Response(status=204)

    def dump(*_: object) -> None:
        with open(args.out, "w") as fh:
            json.dump(
                {
                    "count": len(latencies),
                    "unique": len(seen),
                    "latencies_ms": latencies,
                    "answered_2xx": answered,
                    **({"committed_at": committed} if args.commit_times else {}),
                    **({"arrivals": arrivals} if args.arrivals else {}),
                    **faults,
                },
                fh,
            )
        # Exit at once: raising here would unwind whatever request was mid-write.
        os._exit(0)

    signal.signal(signal.SIGTERM, dump)
    app = web.Application()
    app.router.add_post("/hook", hook)
    web.run_app(
        app,
        host=args.hosts.split(","),
        port=args.port,
        print=None,
        access_log=None,
        handle_signals=False,
    )


if __name__ == "__main__":
    main()
