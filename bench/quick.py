"""The regression guard: the hot paths against their limits, and against the recorded run.

About two minutes, default settings, everything measured against a baseline taken in the
same run (a busy machine moves both). It prints two tables.

The first is the table of the performance issue, row by row with its definitions,
each figure beside the limit it is divided by and the target:

- submit and complete through one ``hookrelay api`` (one tenant, 20 clients) ÷ a bare
  single-row INSERT from 20 connections (bench writepath), each with the whole
  machine's busy CPU per request or row: the API's, the load generator's (the SQL
  client's) and PostgreSQL's. Where both keep the cores busy, the two rates stand in
  the inverse ratio of these, which says what a ratio target asks of every process;
- the API's CPU per submit and per complete ÷ a trivial uvicorn + Starlette route that
  parses the same body and answers the same task shape (bench/_trivial_app.py);
- ``hookrelay serve``'s CPU per task's whole life at 200/s: tasks submitted through the
  API at 200/s, then completed at 200/s and delivered (bench receipt's ``submitted``);
- complete→receipt p50 / p99 at 200/s and 1,000/s through ``serve`` (bench receipt's
  ``commit`` generator), beside a bare POST's at the same rate;
- one dispatcher draining a backlog to one host ÷ a bare aiohttp client (20
  connections), in steady state (timed after the first 5 % of the attempts), and ÷ a
  PgQueuer worker posting with httpx (bench pgq) from the same backlog size.

The second holds the ratios the guard compares (each one higher is better), with the
ones recorded in docs/operations/benchmarks.md ("quick"): the run exits 1 when any falls
more than 25 % below its recorded value. ``--record`` writes this run's tables there as
the new reference. Run it before resolving anything that touches SQL, migrations,
triggers, routes or the dispatcher (CONTRIBUTING.md).

    python -m bench quick [--record]
"""

from __future__ import annotations

import argparse
import base64
import re
import sys
from dataclasses import dataclass

from bench import common
from bench.common import BENCHMARKS, ReceiverProcess, fresh_database, record, server_dsn
from bench.e2e import bare_client_limit, fill
from bench.pgq import pgq_rate
from bench.receipt import Latency, bare, through_hookrelay
from bench.sched import drain_counted, own_cpu_s
from bench.writepath import Figure, measure
from hookrelay.outbox.dispatch.dispatcher import DispatcherConfig
from hookrelay.outbox.keys.at_rest import SecretBox
from tests.harness.procs import ROOT, master_key, service_env

SECTION = "quick: the regression guard"
TOLERANCE = 0.25  # a ratio may fall this far below the recorded one
DRAIN_EVENTS = 6000
PGQ_EVENTS = 3000  # PgQueuer is slower: fewer, for the same share of the run
STEADY_AFTER = 0.05  # the drain is timed once this share of the attempts is made
NAMES = {
    "submit": "submit ÷ bare INSERT",
    "complete": "complete ÷ bare INSERT",
    "submit_cpu": "trivial route CPU ÷ API CPU per submit",
    "complete_cpu": "trivial route CPU ÷ API CPU per complete",
    "life_cpu": "trivial route CPU ÷ `serve` CPU per task's life at 200/s",
    "receipt": "bare POST p50 ÷ complete→receipt p50 at 200/s (`serve`)",
    "receipt_p99": "bare POST p99 ÷ complete→receipt p99 at 200/s (`serve`)",
    "receipt_1000": "bare POST p50 ÷ complete→receipt p50 at 1,000/s (`serve`)",
    "receipt_1000_p99": "bare POST p99 ÷ complete→receipt p99 at 1,000/s (`serve`)",
    "drain": "one-host drain ÷ bare client, steady",
    "drain_cpu": "bare client CPU per POST ÷ dispatcher CPU per delivery",
    "drain_pgq": "one-host drain ÷ PgQueuer + httpx",
}


@dataclass(frozen=True)
class Row:
    """One row of the issue's table: the figure, what it is divided by, the target."""

    figure: str
    now: str
    limit: str
    target: str
    met: bool


def machine(figure: Figure) -> str:
    return f"{figure.machine_us:,.0f} µs of the machine each"


async def write_path(seconds: float) -> tuple[dict[str, float], list[Row], float]:
    """The guard's ratios, the issue's rows, and the trivial route's CPU per request (µs)."""
    f = await measure(seconds=seconds, clients=20, tenant_count=1, full=False, trivial=True)
    ceiling = f["bare"].per_s
    floor = f["trivial"].cpu_us
    sub, com = f["submit_one"], f["complete_one"]
    bare = f"bare INSERT {ceiling:,.0f}/s ({machine(f['bare'])})"
    # A route that does no database work, from the same load generator: how near the
    # ceiling anything answered over HTTP gets on this machine.
    http = f"; trivial route {f['trivial'].per_s:,.0f}/s ({machine(f['trivial'])})"
    trivial = f"trivial route {floor:,.0f} µs"
    rows = [
        Row(
            "submit, one tenant ÷ bare INSERT",
            f"{sub.per_s / ceiling:.2f} ({sub.per_s:,.0f}/s; {machine(sub)})",
            bare + http,
            "≥ 0.5",
            sub.per_s / ceiling >= 0.5,
        ),
        Row(
            "complete ÷ bare INSERT",
            f"{com.per_s / ceiling:.2f} ({com.per_s:,.0f}/s; {machine(com)})",
            bare,
            "≥ 0.3",
            com.per_s / ceiling >= 0.3,
        ),
        Row(
            "API CPU per submit ÷ trivial route",
            f"{sub.cpu_us / floor:.2f} × ({sub.cpu_us:,.0f} µs)",
            trivial,
            "≤ 2.5 ×",
            sub.cpu_us / floor <= 2.5,
        ),
        Row(
            "API CPU per complete ÷ trivial route",
            f"{com.cpu_us / floor:.2f} × ({com.cpu_us:,.0f} µs)",
            trivial,
            "≤ 3.5 ×",
            com.cpu_us / floor <= 3.5,
        ),
    ]
    ratios = {
        "submit": sub.per_s / ceiling,
        "complete": com.per_s / ceiling,
        "submit_cpu": floor / sub.cpu_us,
        "complete_cpu": floor / com.cpu_us,
    }
    return ratios, rows, floor


def _latency_row(rate: int, floor: Latency, got: Latency, p50: float, p99: float) -> Row:
    return Row(
        f"complete→receipt at {rate:,}/s, p50 / p99 (`serve`)",
        f"{got.p50:.1f} / {got.p99:.1f} ms ({got.offered:,.0f}/s offered, {got.sent:,} sent)",
        f"bare POST {floor.p50:.1f} / {floor.p99:.1f} ms",
        f"≤ {p50:g} / ≤ {p99:g} ms",
        got.p50 <= p50 and got.p99 <= p99,
    )


async def receipt(seconds: float, trivial_us: float) -> tuple[dict[str, float], list[Row]]:
    floor = bare(200, seconds)
    got = await through_hookrelay("serve", 200, seconds, submitted=True)
    life_us = got.submit_cpu_us + got.cpu_us
    floor_1000 = bare(1000, seconds)
    got_1000 = await through_hookrelay("serve", 1000, seconds)
    rows = [
        Row(
            "`serve` CPU per task's whole life at 200/s (submit, complete, deliver)",
            f"{life_us / 1000:.2f} ms ({got.submit_cpu_us:,.0f} + {got.cpu_us:,.0f} µs)",
            f"trivial route {trivial_us:,.0f} µs",
            "≤ 0.8 ms",
            life_us <= 800,
        ),
        _latency_row(200, floor, got, 5, 25),
        _latency_row(1000, floor_1000, got_1000, 10, 50),
    ]
    ratios = {
        "life_cpu": trivial_us / life_us,
        "receipt": floor.p50 / got.p50,
        "receipt_p99": floor.p99 / got.p99,
        "receipt_1000": floor_1000.p50 / got_1000.p50,
        "receipt_1000_p99": floor_1000.p99 / got_1000.p99,
    }
    return ratios, rows


async def drain() -> tuple[dict[str, float], list[Row]]:
    server, key = server_dsn(), master_key()
    rx = ReceiverProcess()
    try:
        dsn = await fresh_database(server)
        body = await fill(dsn, SecretBox(base64.urlsafe_b64decode(key)), rx.url, DRAIN_EVENTS)
        cpu0 = own_cpu_s()
        limit = await bare_client_limit(rx.url, body, DRAIN_EVENTS, PER_HOST)
        bare_cpu = (own_cpu_s() - cpu0) / DRAIN_EVENTS
        rate, _, cpu = await drain_counted(
            dsn, service_env(dsn, key, log_level="INFO"), DRAIN_EVENTS, after=STEADY_AFTER
        )
        pgq = await pgq_rate(server, rx.url, body, PGQ_EVENTS, PER_HOST)
    finally:
        rx.stop()
    rows = [
        Row(
            "one-host drain ÷ bare aiohttp client (20 conns), steady",
            f"{rate / limit:.2f} ({rate:,.0f}/s)",
            f"bare client {limit:,.0f}/s",
            "≥ 0.6",
            rate / limit >= 0.6,
        ),
        Row(
            "drain ÷ PgQueuer + httpx",
            f"{rate / pgq:.2f} ×",
            f"PgQueuer {pgq:,.0f}/s",
            "≥ 10 ×",
            rate / pgq >= 10,
        ),
    ]
    return {"drain": rate / limit, "drain_cpu": bare_cpu / cpu, "drain_pgq": rate / pgq}, rows


PER_HOST = DispatcherConfig.per_host_concurrency


def recorded() -> dict[str, float]:
    """The ratios of the last ``--record``, by key (empty if none yet)."""
    path = ROOT / BENCHMARKS
    text = path.read_text() if path.exists() else ""
    marker = f"<!-- {SECTION} -->"
    if marker not in text:
        return {}
    block = text[text.index(marker) : text.index(f"{marker}-end")]
    found = {}
    for key, name in NAMES.items():
        m = re.search(rf"^\| {re.escape(name)} \| ([0-9.]+) \|", block, re.MULTILINE)
        if m:
            found[key] = float(m.group(1))
    return found


def issue_table(rows: list[Row]) -> str:
    lines = ["| figure | now | limit, same run | target | met |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.figure} | {r.now} | {r.limit} | {r.target} | {'yes' if r.met else '**no**'} |"
        )
    return "\n".join(lines)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=3)
    args = p.parse_args()
    before = recorded()
    ratios, rows, trivial_us = await write_path(args.seconds)
    more, latency_rows = await receipt(args.seconds, trivial_us)
    ratios |= more
    more, drain_rows = await drain()
    ratios |= more
    rows += latency_rows + drain_rows
    lines = ["| guard ratio | ratio | recorded | change |", "|---|---|---|---|"]
    fell = []
    for key, name in NAMES.items():
        ref = before.get(key)
        change = "" if ref is None else f"{ratios[key] / ref - 1:+.0%}"
        if ref is not None and ratios[key] < ref * (1 - TOLERANCE):
            fell.append(name)
            change += " **fell**"
        lines.append(f"| {name} | {ratios[key]:.3f} | {'' if ref is None else ref} | {change} |")
    table = issue_table(rows) + "\n\n" + "\n".join(lines) + "\n"
    print(table)
    if common.RECORDING:
        record(SECTION, "python -m bench quick", table.replace(" **fell**", ""))
    if fell:
        print(f"fell more than {TOLERANCE:.0%} below the recorded ratio: {', '.join(fell)}")
        sys.exit(1)
    print(f"every ratio within {TOLERANCE:.0%} of the recorded one" if before else "")
