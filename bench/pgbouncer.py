"""``hookrelay serve`` straight to PostgreSQL and behind PgBouncer in transaction mode.

Three runs of one ``hookrelay serve`` (default settings), each on a fresh database of
the same server, one after the other:

- ``direct``: ``DATABASE_URL`` to PostgreSQL (prepared statements on), the baseline;
- ``unprepared``: the same with ``HOOKRELAY_PREPARED_STATEMENTS=off`` (what a
  transaction pooler costs asyncpg by itself);
- ``pgbouncer``: ``DATABASE_URL`` through Debian's PgBouncer (``pool_mode =
  transaction``, ``default_pool_size`` ``--pool-size``) and
  ``HOOKRELAY_LISTEN_DATABASE_URL`` straight to PostgreSQL.

In each, ``--rate`` tasks a second (an open loop, ``--seconds`` long) are submitted
(``POST /v1/tasks``) and completed (``POST /v1/tasks/{id}/complete``) one after the
other; a receiver process (bench/_receiver.py) stamps each webhook's arrival. The
figures: submit and complete latency as the client sees them, submit→receipt
(from just before the submit is sent to the webhook's arrival), and the CPU seconds
per task of the serve process and of PgBouncer. Ratios are against ``direct``.

    python -m bench pgbouncer [--rate 200] [--seconds 10] [--pool-size 20] [--rounds 2]

``--rounds``: the three runs again, in the other order each time; the table counts
every round's samples.

Needs ``pgbouncer`` (Debian: ``apt-get install pgbouncer``).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import asyncpg

from bench.common import ReceiverProcess, fresh_database, percentile, record, server_dsn
from bench.sched import cpu_s
from tests.harness.pgbouncer import PgBouncer, pgbouncer_binary
from tests.harness.procs import ROOT, free_port, hookrelay, master_key, service_env, wait_for_port

ADMIN = {"Authorization": "Bearer bench"}
WARM_UP = 100  # tasks before the clock starts: connections opened, code paths warm
CONCURRENCY = 100  # client connections to the API
MODES = ("direct", "unprepared", "pgbouncer")


@dataclass
class Run:
    mode: str
    tasks: int
    submit_ms: list[float]
    complete_ms: list[float]
    receipt_ms: list[float]
    serve_cpu_s: float
    bouncer_cpu_s: float
    delivered: int
    errors: int

    def per_task_ms(self, cpu_s: float) -> float:
        return cpu_s / self.tasks * 1000


@dataclass
class Timings:
    sent: dict[str, float]  # each measured task's submit, unix seconds, by id
    submit_ms: list[float]
    complete_ms: list[float]
    errors: int = 0


async def _tasks(
    http: aiohttp.ClientSession, auth: dict[str, str], url: str, n: int, rate: float | None
) -> Timings:
    """Submit and complete ``n`` tasks, at ``rate`` a second (None: all at once)."""
    timings = Timings({}, [], [])

    async def one() -> None:
        t0, w0 = time.perf_counter(), time.time()
        body = {"type": "bench", "callbackUrl": url}
        async with http.post("/v1/tasks", json=body, headers=auth) as r:
            if r.status >= 500:
                timings.errors += 1
                return
            task_id = str((await r.json())["id"])
        t1 = time.perf_counter()
        done = {"status": "succeeded", "result": {"ok": True}}
        async with http.post(f"/v1/tasks/{task_id}/complete", json=done, headers=ADMIN) as r:
            await r.read()
            if r.status >= 500:
                timings.errors += 1
                return
        timings.sent[task_id] = w0
        timings.submit_ms.append((t1 - t0) * 1000)
        timings.complete_ms.append((time.perf_counter() - t1) * 1000)

    t0 = time.perf_counter()
    pending = []
    for i in range(n):
        delay = (i / rate if rate else 0) - (time.perf_counter() - t0)
        if delay > 0:
            await asyncio.sleep(delay)
        pending.append(asyncio.create_task(one()))
    await asyncio.gather(*pending)
    return timings


async def _run(mode: str, server: str, args: argparse.Namespace, binary: str) -> Run:
    dsn = await fresh_database(server)
    rx = ReceiverProcess("--arrivals")
    bouncer = PgBouncer(binary, dsn, pool_size=args.pool_size) if mode == "pgbouncer" else None
    extra: dict[str, str] = {}
    if mode == "unprepared":
        extra["prepared_statements"] = "off"
    if bouncer is not None:
        extra["listen_database_url"] = dsn
    port = free_port()
    env = service_env(
        bouncer.dsn() if bouncer else dsn, master_key(), host="127.0.0.1", port=port, **extra
    )
    log = Path(tempfile.mkstemp(prefix=f"bench-pgbouncer-{mode}-", suffix=".log")[1])
    serve = subprocess.Popen(hookrelay("serve"), env=env, cwd=ROOT, stderr=log.open("wb"))
    n = int(args.rate * args.seconds)
    try:
        wait_for_port(port, serve)
        connector = aiohttp.TCPConnector(limit=CONCURRENCY)
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", connector=connector) as http:
            async with http.post("/v1/admin/tenants", json={"name": "b"}, headers=ADMIN) as r:
                auth = {"Authorization": f"Bearer {(await r.json())['apiKey']}"}
            # Connections opened and code paths warm before the clocks start.
            await _tasks(http, auth, rx.url + "?warm", WARM_UP, None)
            await _until_delivered(dsn, WARM_UP)
            cpu0 = cpu_s(serve.pid)
            bcpu0 = bouncer.cpu_s() if bouncer else 0.0
            timings = await _tasks(http, auth, rx.url, n, args.rate)
            await _until_delivered(dsn, WARM_UP + len(timings.sent))
            serve_cpu = cpu_s(serve.pid) - cpu0
            bouncer_cpu = (bouncer.cpu_s() - bcpu0) if bouncer else 0.0
    finally:
        serve.terminate()
        serve.wait(30)
        if bouncer is not None:
            bouncer.stop()
    stats = rx.stop()
    arrivals: dict[str, float] = stats.get("arrivals", {})
    receipt = [(arrivals[t] - s) * 1000 for t, s in timings.sent.items() if t in arrivals]
    return Run(
        mode,
        n,
        timings.submit_ms,
        timings.complete_ms,
        receipt,
        serve_cpu,
        bouncer_cpu,
        len(receipt),
        timings.errors,
    )


async def _until_delivered(dsn: str, n: int, timeout: float = 120) -> None:
    """Until ``n`` tasks show their webhook delivered (or ``timeout`` runs out)."""
    conn = await asyncpg.connect(dsn)
    try:
        deadline = time.monotonic() + timeout
        query = "SELECT count(*) FROM tasks WHERE delivery_status = 'delivered'"
        while time.monotonic() < deadline and await conn.fetchval(query) < n:
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


def _merged(runs: list[Run]) -> Run:
    """The rounds of one mode as one run: their samples together, their CPU summed."""
    return Run(
        runs[0].mode,
        sum(r.tasks for r in runs),
        [x for r in runs for x in r.submit_ms],
        [x for r in runs for x in r.complete_ms],
        [x for r in runs for x in r.receipt_ms],
        sum(r.serve_cpu_s for r in runs),
        sum(r.bouncer_cpu_s for r in runs),
        sum(r.delivered for r in runs),
        sum(r.errors for r in runs),
    )


def table(runs: list[Run], args: argparse.Namespace) -> str:
    rows = [
        "| figure | "
        + " | ".join(r.mode for r in runs)
        + " | "
        + " | ".join(f"{r.mode} ÷ direct" for r in runs[1:])
        + " |",
        "|---" * (1 + 2 * len(runs) - 1) + "|",
    ]

    def row(name: str, values: list[float], fmt: str = "{:.2f}") -> None:
        cells = [fmt.format(v) for v in values]
        ratios = [f"{v / values[0]:.2f}" if values[0] else "–" for v in values[1:]]
        rows.append(f"| {name} | " + " | ".join(cells + ratios) + " |")

    for label, pick in (
        ("submit", lambda r: r.submit_ms),
        ("complete", lambda r: r.complete_ms),
        ("submit→receipt", lambda r: r.receipt_ms),
    ):
        for q in (0.5, 0.95):
            row(f"{label} p{int(q * 100)}, ms", [percentile(pick(r), q) for r in runs], "{:.1f}")
    row("serve CPU per task, ms", [r.per_task_ms(r.serve_cpu_s) for r in runs])
    row(
        "serve + PgBouncer CPU per task, ms",
        [r.per_task_ms(r.serve_cpu_s + r.bouncer_cpu_s) for r in runs],
    )
    delivered = ", ".join(f"{r.mode} {r.delivered:,}/{r.tasks:,}" for r in runs)
    errors = sum(r.errors for r in runs)
    return (
        f"{args.rate:g} tasks/s for {args.seconds:g} s in each run (submit, then complete), "
        f"{args.rounds} run(s) of each mode, alternating the order; "
        f"{CONCURRENCY} client connections; PgBouncer 1.18 `pool_mode = transaction`, "
        f"`default_pool_size = {args.pool_size}`; PostgreSQL's own CPU not counted\n\n"
        + "\n".join(rows)
        + f"\n\ndelivered: {delivered}; 5xx answers: {errors}\n"
    )


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=float, default=200)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--pool-size", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    binary = pgbouncer_binary()
    if binary is None:
        sys.exit("pgbouncer is not installed (apt-get install pgbouncer)")
    server = server_dsn()
    # Each round runs the modes in the other order, so that a stall of the shared
    # server (a checkpoint, another tenant's load) does not always fall on one of them.
    by_mode: dict[str, list[Run]] = {m: [] for m in MODES}
    for i in range(args.rounds):
        for mode in MODES if i % 2 == 0 else MODES[::-1]:
            by_mode[mode].append(await _run(mode, server, args, binary))
    text = table([_merged(by_mode[m]) for m in MODES], args)
    print(text)
    record(
        "serve behind PgBouncer",
        f"python -m bench pgbouncer --rate {args.rate:g} --seconds {args.seconds:g} "
        f"--pool-size {args.pool_size} --rounds {args.rounds}",
        text,
    )
