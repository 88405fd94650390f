"""Complete→receipt through the API at a steady rate: ``serve``, and ``api`` + ``dispatch``.

Tasks are queued first (in bulk, not timed). Then a load generator process
(bench/_rategen.py, an open loop) calls ``POST /v1/tasks/{id}/complete`` at
``--rate`` a second, and a receiver process (bench/_receiver.py) stamps each
webhook's arrival against the completion time in its body. The baseline, in the
same run, is the same generator POSTing straight to a receiver at the same rate,
with its send time in the body: the floor for a request to cross the machine.
Every process shares the same two cores; all run at default settings.

    python -m bench receipt [--rates 200,1000] [--seconds 10] [--modes serve,split]
                            [--generators commit,open]

``serve`` is the one command users start; ``split`` is ``hookrelay api`` and
``hookrelay dispatch`` as two processes.

Two generators, each a run of its own, both open loops (each request sent at its time):

- ``commit``: up to 500 connections; the latency runs from the completion's commit
  (the timestamp in the webhook's body) to its receipt, so time spent before the
  commit (a request waiting for a connection, or in the API's queue) is not seen;
- ``open``: one aiohttp session with 100 connections, as a user's client pool would
  have; the latency runs from just before the complete request is sent to the
  webhook's receipt, so waiting for a connection and for the API counts. What a
  user sees.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import asyncpg

from bench.common import (
    DESTINATION_KEY,
    ReceiverProcess,
    fresh_database,
    percentile,
    record,
    server_dsn,
)
from bench.sched import cpu_s
from hookrelay.outbox import ids
from hookrelay.outbox.destinations import host_key
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.store import changes
from hookrelay.outbox.tenants import create_tenant
from tests.harness.procs import (
    ROOT,
    WORKERS_UP_S,
    free_port,
    hookrelay,
    master_key,
    service_env,
    wait_for_port,
)

WARM = 50  # completions first, unmeasured: connections open, caches warm


@dataclass(frozen=True)
class Latency:
    p50: float
    p99: float
    max: float
    delivered: int
    offered: float
    cpu_us: float = float("nan")  # hookrelay's processes, CPU per completion
    sent: int = 0  # requests answered 2xx (completions, or bare POSTs)
    # With ``submitted``: their CPU per submit, made through the API at the same rate.
    submit_cpu_us: float = float("nan")

    def row(self) -> str:
        return f"{self.p50:.1f} / {self.p99:.1f} / {self.max:.1f}"


def rategen(url: str, rate: float, seconds: float, *extra: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench._rategen", url, "--rate", str(rate)]
    cmd += ["--seconds", str(seconds), *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def of(
    stats: dict[str, Any], offered: float, cpu_us: float = float("nan"), sent: int = 0
) -> Latency:
    lat = list(stats["latencies_ms"])
    return Latency(
        percentile(lat, 0.5),
        percentile(lat, 0.99),
        max(lat, default=float("nan")),
        len(lat),
        offered,
        cpu_us,
        sent or len(lat),
    )


def bare(rate: float, seconds: float) -> Latency:
    """A bare POST to a receiver at ``rate``: its send→receipt."""
    rx = ReceiverProcess()
    try:
        got = rategen(rx.url, rate, seconds, "--stamp")
    finally:
        stats = rx.stop()
    return of(stats, got["offered_per_s"])


async def seed(dsn: str, tenant_id: str, url: str, n: int) -> list[str]:
    task_ids = [ids.task_id() for _ in range(n)]
    conn = await asyncpg.connect(dsn)
    try:
        await conn.copy_records_to_table(
            "tasks",
            records=[(t, tenant_id, "bench", url) for t in task_ids],
            columns=["id", "tenant_id", "type", "callback_url"],
        )
        # Its destination key, as a submit keeps it: each completion is one statement.
        await conn.execute(DESTINATION_KEY, url, host_key(url))
        await changes.number_pending(conn)  # set-up, not the measured API's work
    finally:
        await conn.close()
    return task_ids


async def delivered(dsn: str, n: int, timeout: float) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = await conn.fetchval(
                "SELECT count(*) FROM tasks WHERE delivery_status = 'delivered'"
            )
            if got >= n:
                return
            await asyncio.sleep(0.2)
    finally:
        await conn.close()


OPEN_LOOP_CONNECTIONS = 100
GENERATORS = {
    "commit": "commit→receipt, ≤ 500 connections",
    "open": f"send→receipt, {OPEN_LOOP_CONNECTIONS} connections",
}


async def submitted_ids(dsn: str, url: str) -> list[str]:
    """The tasks submitted with ``url`` as their callback, in the order they were made."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT id FROM tasks WHERE callback_url = $1 ORDER BY created_at, id", url
        )
    finally:
        await conn.close()
    return [r["id"] for r in rows]


async def through_hookrelay(
    mode: str,
    rate: float,
    seconds: float,
    *,
    workers: int | None = None,
    open_loop: bool = False,
    submitted: bool = False,
) -> Latency:
    """``workers``: HOOKRELAY_WORKERS of ``serve`` or ``api`` (None: their default).
    ``open_loop``: the ``open`` generator (send→receipt), else ``commit`` (commit→receipt).
    ``submitted``: the measured tasks are submitted through the API first, at ``rate``
    (the task's whole life: submit, complete, deliver), not inserted in bulk."""
    dsn = await fresh_database(server_dsn())
    key = master_key()
    conn = await asyncpg.connect(dsn)
    try:
        tenant = await create_tenant(conn, "bench", SecretBox(base64.urlsafe_b64decode(key)))
    finally:
        await conn.close()
    rx = ReceiverProcess(*(["--arrivals"] if open_loop else []))
    n = int(rate * seconds)
    warm = await seed(dsn, tenant.id, rx.url + "?warm=1", WARM)
    task_ids = [] if submitted else await seed(dsn, tenant.id, rx.url, n)
    work = Path(tempfile.mkdtemp())
    paths = work / "complete.txt"
    warm_paths = work / "warm.txt"
    warm_paths.write_text("".join(f"/{t}/complete\n" for t in warm))
    port = free_port()
    env = service_env(dsn, key, host="127.0.0.1", port=port)
    if workers is not None:
        env["HOOKRELAY_WORKERS"] = str(workers)
    procs = [subprocess.Popen(hookrelay("serve" if mode == "serve" else "api"), env=env, cwd=ROOT)]
    if mode == "split":
        procs.append(subprocess.Popen(hookrelay("dispatch"), env=env, cwd=ROOT))
    try:
        wait_for_port(port, procs[0])
        # The port answers once the first worker listens; the others, a moment later.
        time.sleep(WORKERS_UP_S)
        url = f"http://127.0.0.1:{port}/v1/tasks"
        done = json.dumps({"status": "succeeded", "result": {"ok": True}})
        common = ["--body", done, "--header", "Authorization:Bearer bench"]
        rategen(url, 100, WARM / 100, "--paths", str(warm_paths), *common)
        await delivered(dsn, WARM, 60)
        submit_cpu = float("nan")
        if submitted:
            cpu0 = sum(cpu_s(p.pid) for p in procs)
            submit = json.dumps({"type": "bench", "callbackUrl": rx.url})
            made = rategen(
                url,
                rate,
                seconds,
                "--body",
                submit,
                "--header",
                f"Authorization:Bearer {tenant.api_key}",
            )
            submit_cpu = (sum(cpu_s(p.pid) for p in procs) - cpu0) / n
            if made["statuses"].get("202", 0) != n or made["errors"]:
                print(f"submits: {made['statuses']}, {made['errors']} errors", file=sys.stderr)
            task_ids = await submitted_ids(dsn, rx.url)
        paths.write_text("".join(f"/{t}/complete\n" for t in task_ids))
        cpu0 = sum(cpu_s(p.pid) for p in procs)
        sends = work / "sent.json"
        how = ["--connections", str(OPEN_LOOP_CONNECTIONS), "--send-times", str(sends)]
        got = rategen(
            url, rate, seconds, "--paths", str(paths), *common, *(how if open_loop else [])
        )
        answered = got["statuses"].get("200", 0)
        if answered != n or got["errors"]:
            print(f"completions: {got['statuses']}, {got['errors']} errors", file=sys.stderr)
        await delivered(dsn, WARM + answered, 120)
        cpu = (sum(cpu_s(p.pid) for p in procs) - cpu0) / n
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
        stats = rx.stop()
    if open_loop:
        sent_at: dict[str, float] = json.loads(sends.read_text())
        arrived: dict[str, float] = stats["arrivals"]
        stats["latencies_ms"] = [
            (arrived[path.split("/")[1]] - at) * 1000
            for path, at in sent_at.items()
            if path.split("/")[1] in arrived
        ]
    return replace(
        of(stats, got["offered_per_s"], cpu * 1e6, answered), submit_cpu_us=submit_cpu * 1e6
    )


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rates", default="200,1000")
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--modes", default="serve,split")
    p.add_argument("--generators", default="commit,open")
    p.add_argument(
        "--submitted",
        action="store_true",
        help="submit the measured tasks through the API first, at the same rate, and "
        "add the CPU per submit (the task's whole life, as bench quick measures it)",
    )
    args = p.parse_args()
    generators = args.generators.split(",")
    rates = [float(r) for r in args.rates.split(",")]
    modes = args.modes.split(",")
    lines = [
        "| rate offered | what | generator | delivered | p50 / p99 / max ms "
        "| CPU per completion, µs |" + (" CPU per submit, µs |" if args.submitted else ""),
        "|---|---|---|---|---|---|" + ("---|" if args.submitted else ""),
    ]
    extra = " |" if args.submitted else ""
    for rate in rates:
        base = bare(rate, args.seconds)
        lines.append(
            f"| {rate:,.0f}/s ({base.offered:,.0f}) | bare POST to the receiver | send→receipt | "
            f"{base.delivered:,} | {base.row()} | |{extra}"
        )
        for mode in modes:
            for generator in generators:
                got = await through_hookrelay(
                    mode,
                    rate,
                    args.seconds,
                    open_loop=generator == "open",
                    submitted=args.submitted,
                )
                what = "`serve`" if mode == "serve" else "`api` + `dispatch`"
                lines.append(
                    f"| {rate:,.0f}/s ({got.offered:,.0f}) | {what} | {GENERATORS[generator]} | "
                    f"{got.delivered:,} of {got.sent:,} | {got.row()} | {got.cpu_us:,.0f} |"
                    + (f" {got.submit_cpu_us:,.0f} |" if args.submitted else "")
                )
                print(lines[-1], flush=True)
    table = "\n".join(lines) + "\n"
    print(table)
    record(
        "receipt: complete→receipt through the API",
        f"python -m bench receipt --rates {args.rates} --seconds {args.seconds:g} "
        f"--modes {args.modes} --generators {args.generators}"
        + (" --submitted" if args.submitted else ""),
        table,
    )
