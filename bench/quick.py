"""The regression guard: the hot paths as ratios to their limits, against the recorded ones.

At most a minute, default settings. Each figure is a ratio against a baseline measured
in the same run, so a busy machine moves both:

- submit and complete through one ``hookrelay api`` ÷ a bare INSERT (bench writepath);
- the API's CPU per submit and per complete against a trivial uvicorn + Starlette route
  that parses the same body and answers the same task shape (bench/_trivial_app.py),
  as the trivial route's CPU per request ÷ the API's (higher is better; the issue's
  "API CPU ≤ 2.5 × the trivial route" is a ratio ≥ 0.4 here, and the × figures are
  printed under the table);
- a bare POST's p50 ÷ complete→receipt p50 at 200/s through ``hookrelay serve``
  (bench receipt: higher is better, 1.0 would be no cost at all);
- one dispatcher's drain of one host ÷ a bare aiohttp client, and the bare client's
  CPU per POST ÷ the dispatcher's CPU per delivery (bench sched).

Each ratio is compared with the one recorded in docs/operations/benchmarks.md ("quick");
the run exits 1 when any falls more than 25 % below it. ``--record`` writes this
run's ratios there as the new reference. Run it before resolving anything that
touches SQL, migrations, triggers, routes or the dispatcher (CONTRIBUTING.md).

    python -m bench quick [--record]
"""

from __future__ import annotations

import argparse
import base64
import re
import sys

from bench import common
from bench.common import BENCHMARKS, ReceiverProcess, fresh_database, record, server_dsn
from bench.e2e import bare_client_limit, fill
from bench.receipt import bare, through_hookrelay
from bench.sched import drain_counted, own_cpu_s
from bench.writepath import measure
from hookrelay.outbox.dispatch.dispatcher import DispatcherConfig
from hookrelay.outbox.keys.at_rest import SecretBox
from tests.harness.procs import ROOT, master_key, service_env

SECTION = "quick: the regression guard"
TOLERANCE = 0.25  # a ratio may fall this far below the recorded one
DRAIN_EVENTS = 6000
NAMES = {
    "submit": "submit ÷ bare INSERT",
    "complete": "complete ÷ bare INSERT",
    "submit_cpu": "trivial route CPU ÷ API CPU per submit",
    "complete_cpu": "trivial route CPU ÷ API CPU per complete",
    "receipt": "bare POST p50 ÷ complete→receipt p50 at 200/s (`serve`)",
    "drain": "one-host drain ÷ bare client",
    "drain_cpu": "bare client CPU per POST ÷ dispatcher CPU per delivery",
}


async def write_path(seconds: float) -> tuple[dict[str, float], str]:
    f = await measure(seconds=seconds, clients=20, tenant_count=1, full=False, trivial=True)
    ceiling = f["bare"].per_s
    floor = f["trivial"].cpu_us
    sub, com = f["submit_one"].cpu_us, f["complete_one"].cpu_us
    note = (
        f"API CPU per submit {sub:,.0f} µs = {sub / floor:.1f} × the trivial route "
        f"({floor:,.0f} µs); per complete {com:,.0f} µs = {com / floor:.1f} ×"
    )
    ratios = {
        "submit": f["submit_one"].per_s / ceiling,
        "complete": f["complete_one"].per_s / ceiling,
        "submit_cpu": floor / sub,
        "complete_cpu": floor / com,
    }
    return ratios, note


async def receipt(seconds: float) -> dict[str, float]:
    floor = bare(200, seconds)
    got = await through_hookrelay("serve", 200, seconds)
    return {"receipt": floor.p50 / got.p50}


async def drain() -> dict[str, float]:
    server, key = server_dsn(), master_key()
    rx = ReceiverProcess()
    try:
        dsn = await fresh_database(server)
        body = await fill(dsn, SecretBox(base64.urlsafe_b64decode(key)), rx.url, DRAIN_EVENTS)
        cpu0 = own_cpu_s()
        limit = await bare_client_limit(rx.url, body, DRAIN_EVENTS, PER_HOST)
        bare_cpu = (own_cpu_s() - cpu0) / DRAIN_EVENTS
        rate, _, cpu = await drain_counted(
            dsn, service_env(dsn, key, log_level="INFO"), DRAIN_EVENTS
        )
    finally:
        rx.stop()
    return {"drain": rate / limit, "drain_cpu": bare_cpu / cpu}


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


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=3)
    args = p.parse_args()
    before = recorded()
    ratios, note = await write_path(args.seconds)
    ratios |= await receipt(args.seconds)
    ratios |= await drain()
    lines = ["| figure | ratio | recorded | change |", "|---|---|---|---|"]
    fell = []
    for key, name in NAMES.items():
        ref = before.get(key)
        change = "" if ref is None else f"{ratios[key] / ref - 1:+.0%}"
        if ref is not None and ratios[key] < ref * (1 - TOLERANCE):
            fell.append(name)
            change += " **fell**"
        lines.append(f"| {name} | {ratios[key]:.3f} | {'' if ref is None else ref} | {change} |")
    table = "\n".join(lines) + "\n\n" + note + "\n"
    print(table)
    if common.RECORDING:
        record(SECTION, "python -m bench quick", table.replace(" **fell**", ""))
    if fell:
        print(f"fell more than {TOLERANCE:.0%} below the recorded ratio: {', '.join(fell)}")
        sys.exit(1)
    print(f"every ratio within {TOLERANCE:.0%} of the recorded one" if before else "")
