"""The write path: submit and complete through one ``hookrelay api`` against a bare INSERT.

The ceiling, measured in the same run on the same server, is a single-statement
autocommit INSERT of a task-sized row into a table with no trigger and no index but
its key, from ``--clients`` asyncpg connections: what the database itself commits.
Then, from a load generator process with the same number of clients:
``POST /v1/tasks`` and ``POST /v1/tasks/{id}/complete`` against one ``hookrelay api``
(default settings), for one tenant and for ``--tenants`` tenants. Also, as a
diagnosis, the same INSERT into ``tasks`` (with its indexes and change-log trigger)
from SQL alone.

    python -m bench writepath [--seconds 5] [--clients 20] [--tenants 20]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from bench.api import load
from bench.common import DESTINATION_KEY, fresh_database, record, server_dsn
from bench.sched import BusyCores, cpu_s, machine_busy_s
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

HOOK = "http://127.0.0.1:9/hook"
SUBMIT = {"type": "bench", "callbackUrl": HOOK, "input": {"n": 1}}
INPUT = json.dumps(SUBMIT["input"])
BARE_TABLE = """
CREATE TABLE bench_bare (LIKE tasks INCLUDING DEFAULTS);
ALTER TABLE bench_bare ADD PRIMARY KEY (id);
"""
BARE_INSERT = (
    "INSERT INTO bench_bare (id, tenant_id, type, input, callback_url) VALUES ($1, $2, $3, $4, $5)"
)
TASK_INSERT = (
    "INSERT INTO tasks (id, tenant_id, type, input, callback_url) VALUES ($1, $2, $3, $4, $5)"
)


@dataclass(frozen=True)
class Figure:
    name: str
    per_s: float
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    bad: int = 0
    cpu_us: float = float("nan")  # the API process's CPU per request
    # The whole machine's busy CPU per request (or row) while it ran: the API's, the
    # load generator's (or the SQL client's) and PostgreSQL's. Closed-loop rates of
    # two figures that keep the cores busy stand in the inverse ratio of these.
    machine_us: float = float("nan")


async def sql_rate(
    dsn: str, statement: str, tenants: list[str], clients: int, seconds: float
) -> Figure:
    """``statement`` (an INSERT of one row) in autocommit from ``clients`` connections."""
    conns = [await asyncpg.connect(dsn) for _ in range(clients)]
    done = 0
    stop_at = 0.0

    async def one(i: int, conn: asyncpg.Connection) -> None:
        nonlocal done
        n = 0
        while time.perf_counter() < stop_at:
            tenant = tenants[(i + n) % len(tenants)]
            await conn.execute(statement, ids.task_id(), tenant, "bench", INPUT, HOOK)
            n += 1
        done += n

    try:
        stop_at = time.perf_counter() + 0.5  # warm up: plans cached, pages in memory
        await asyncio.gather(*(one(i, c) for i, c in enumerate(conns)))
        done = 0
        busy0, t0 = machine_busy_s(), time.perf_counter()
        stop_at = t0 + seconds
        await asyncio.gather(*(one(i, c) for i, c in enumerate(conns)))
        busy = machine_busy_s() - busy0
        rate = done / (time.perf_counter() - t0)
        return Figure(statement.split(" (")[0], rate, machine_us=busy / done * 1e6)
    finally:
        for c in conns:
            await c.close()


async def seed_tasks(dsn: str, tenants: list[str], n: int) -> list[str]:
    """``n`` queued tasks spread over ``tenants``, inserted in bulk; their ids."""
    task_ids = [ids.task_id() for _ in range(n)]
    conn = await asyncpg.connect(dsn)
    try:
        await conn.copy_records_to_table(
            "tasks",
            records=[(t, tenants[i % len(tenants)], "bench", HOOK) for i, t in enumerate(task_ids)],
            columns=["id", "tenant_id", "type", "callback_url"],
        )
        # Its destination key, as a submit keeps it: each completion is one statement.
        await conn.execute(DESTINATION_KEY, HOOK, host_key(HOOK))
        # Their creations are changes for the status streams: numbered now, in the
        # set-up, not by the API process while it is being measured.
        await changes.number_pending(conn)
    finally:
        await conn.close()
    return task_ids


async def trivial_route(seconds: float, clients: int) -> Figure:
    """One uvicorn process's own limit: a trivial route that parses the submit's body and
    answers a task of the same shape (bench/_trivial_app.py), same settings, same clients."""
    port = free_port()
    trivial = subprocess.Popen([sys.executable, "-m", "bench._trivial_app", str(port)], cwd=ROOT)
    try:
        wait_for_port(port, trivial)
        cpu0 = cpu_s(trivial.pid)
        row, cores = loaded(
            f"http://127.0.0.1:{port}/task",
            method="POST",
            body=json.dumps(SUBMIT),
            headers={"Content-Type": "application/json"},
            seconds=seconds,
            concurrency=clients,
        )
        return http_figure("trivial", row, cpu_s(trivial.pid) - cpu0, cores)
    finally:
        trivial.terminate()
        trivial.wait(30)


# The load generator measures after its interpreter starts and a second of warm-up:
# the machine's busy cores are read from this far into a run, for its last second less.
MEASURED_AFTER_S = 2.0


def loaded(url: str, **kwargs: Any) -> tuple[dict[str, Any], float]:
    """:func:`bench.api.load`, and the machine's busy cores inside its measured part."""
    window = BusyCores(after=MEASURED_AFTER_S, span=max(0.5, kwargs["seconds"] - 1.0))
    window.start()
    row = load(url, **kwargs)
    window.join()
    return row, window.cores


def http_figure(name: str, row: dict[str, Any], cpu_s: float, cores: float) -> Figure:
    bad = sum(n for s, n in row["statuses"].items() if not str(s).startswith("2"))
    answered = row["requests"] + row.get("warmup_requests", 0)
    cpu_us = cpu_s / answered * 1e6 if answered else float("nan")
    machine_us = cores / row["rps"] * 1e6 if row["rps"] else float("nan")
    return Figure(
        name, row["rps"], row["p50_ms"], row["p99_ms"], bad + int(row["errors"]), cpu_us, machine_us
    )


async def measure(
    *,
    seconds: float,
    clients: int,
    tenant_count: int,
    full: bool = True,
    workers: int | None = None,
    trivial: bool = False,
) -> dict[str, Figure]:
    """Every figure of the write path, from one fresh database and one ``hookrelay api``.

    ``full`` False (the regression guard): the ceiling and the one-tenant submit and
    complete only, and the trivial route if ``trivial``. ``workers``: the API's
    HOOKRELAY_WORKERS (None: its default).
    """
    dsn = await fresh_database(server_dsn())
    key = master_key()
    box = SecretBox(base64.urlsafe_b64decode(key))
    conn = await asyncpg.connect(dsn)
    try:
        made = [await create_tenant(conn, f"t{i}", box) for i in range(tenant_count)]
        await conn.execute(BARE_TABLE)
    finally:
        await conn.close()
    tenants = [t.id for t in made]
    figures: dict[str, Figure] = {}
    figures["bare"] = await sql_rate(dsn, BARE_INSERT, tenants[:1], clients, seconds)
    if full:
        figures["sql_one"] = await sql_rate(dsn, TASK_INSERT, tenants[:1], clients, seconds)
    labels = ("one", "many") if full else ("one",)
    work = Path(tempfile.mkdtemp())
    auths = {}
    for label, subset in (("one", made[:1]), ("many", made)):
        auths[label] = work / f"auths-{label}.txt"
        auths[label].write_text("".join(f"Bearer {t.api_key}\n" for t in subset))
    # Enough queued tasks that no complete finds its task finished: the fastest
    # complete rate seen here, for the warm-up and the run, with room to spare.
    per_run = int(6000 * (seconds + 1.5))
    paths = {}
    for label in labels:
        task_ids = await seed_tasks(dsn, tenants[:1] if label == "one" else tenants, per_run)
        paths[label] = work / f"complete-{label}.txt"
        paths[label].write_text("".join(f"/{t}/complete\n" for t in task_ids))
    if full or trivial:
        figures["trivial"] = await trivial_route(seconds, clients)
    port = free_port()
    env = service_env(dsn, key, host="127.0.0.1", port=port)
    if workers is not None:
        env["HOOKRELAY_WORKERS"] = str(workers)
    api = subprocess.Popen(hookrelay("api"), env=env, cwd=ROOT)
    try:
        wait_for_port(port, api)
        # The port answers once the first worker listens; the others, a moment later.
        time.sleep(WORKERS_UP_S)
        base = f"http://127.0.0.1:{port}/v1/tasks"
        common: dict[str, Any] = {"seconds": seconds, "concurrency": clients}
        json_header = {"Content-Type": "application/json"}
        for label in labels:
            cpu0 = cpu_s(api.pid)
            row, cores = loaded(
                base,
                method="POST",
                body=json.dumps(SUBMIT),
                headers=json_header,
                auths=str(auths[label]),
                **common,
            )
            cpu = cpu_s(api.pid) - cpu0
            figures[f"submit_{label}"] = http_figure(f"submit {label}", row, cpu, cores)
        done = json.dumps({"status": "succeeded", "result": {"ok": True}})
        for label in labels:
            cpu0 = cpu_s(api.pid)
            row, cores = loaded(
                base,
                method="POST",
                body=done,
                headers={**json_header, "Authorization": "Bearer bench"},
                paths=str(paths[label]),
                **common,
            )
            cpu = cpu_s(api.pid) - cpu0
            figures[f"complete_{label}"] = http_figure(f"complete {label}", row, cpu, cores)
    finally:
        api.terminate()
        api.wait(30)
    return figures


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--tenants", type=int, default=20)
    args = p.parse_args()
    f = await measure(seconds=args.seconds, clients=args.clients, tenant_count=args.tenants)
    ceiling = f["bare"].per_s
    rows = [
        ("bare INSERT, autocommit (the ceiling)", f["bare"]),
        ("INSERT INTO tasks, SQL only, one tenant", f["sql_one"]),
        ("POST to a trivial Starlette route (one process's HTTP limit)", f["trivial"]),
        ("`POST /v1/tasks`, one tenant", f["submit_one"]),
        (f"`POST /v1/tasks`, {args.tenants} tenants", f["submit_many"]),
        ("`POST /v1/tasks/{id}/complete`, one tenant", f["complete_one"]),
        (f"`POST /v1/tasks/{{id}}/complete`, {args.tenants} tenants", f["complete_many"]),
    ]
    lines = [
        f"{args.clients} clients; one `hookrelay api` at default settings",
        "",
        "| what | per s | × ceiling | p50 ms | p99 ms | API CPU per request, µs "
        "| machine CPU per request, µs | non-2xx |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, fig in rows:
        lat = "" if fig.p50_ms != fig.p50_ms else f"{fig.p50_ms:.1f}"
        tail = "" if fig.p99_ms != fig.p99_ms else f"{fig.p99_ms:.1f}"
        ratio = fig.per_s / ceiling
        cpu = "" if fig.cpu_us != fig.cpu_us else f"{fig.cpu_us:,.0f}"
        machine = "" if fig.machine_us != fig.machine_us else f"{fig.machine_us:,.0f}"
        lines.append(
            f"| {name} | {fig.per_s:,.0f} | {ratio:.2f} | {lat} | {tail} | {cpu} | {machine} "
            f"| {fig.bad} |"
        )
    lines += [
        "",
        f"machine CPU per request: every process's busy CPU (API, load generator or SQL "
        f"client, PostgreSQL) on this machine's {os.cpu_count()} cores, divided by the rate",
        "",
        f"one tenant ÷ {args.tenants} tenants: submit "
        f"{f['submit_one'].per_s / f['submit_many'].per_s:.2f}, complete "
        f"{f['complete_one'].per_s / f['complete_many'].per_s:.2f}",
        "",
    ]
    table = "\n".join(lines)
    print(table)
    record(
        "writepath: submit and complete against a bare INSERT",
        f"python -m bench writepath --seconds {args.seconds:g} --clients {args.clients} "
        f"--tenants {args.tenants}",
        table,
    )
