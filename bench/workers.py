"""Worker processes: the write path of ``api`` and serve's complete→receipt, by HOOKRELAY_WORKERS.

For each count, in one run on one machine: ``POST /v1/tasks`` and
``POST /v1/tasks/{id}/complete`` against ``hookrelay api`` (one tenant, ``--clients``
connections, as ``python -m bench writepath``), with the bare INSERT ceiling measured
right before, then ``hookrelay serve`` completing at each of ``--rates`` a second (as
``python -m bench receipt``). CPU is hookrelay's: the supervisor and all its workers.
Ratios are to the first count, from the same run; the rates of submit and complete are
compared as fractions of the ceiling measured just before each, which cancels some of
a shared machine's drift.

    python -m bench workers [--counts 1,2] [--seconds 5] [--clients 20] [--rates 200,1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench import receipt, writepath
from bench.common import record
from hookrelay.service.server import supervisor


def _cell(value: float, fmt: str = ",.0f") -> str:
    return "" if value != value else format(value, fmt)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--counts", default="1,2")
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--rates", default="200,1000")
    args = p.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    runs: list[tuple[int, dict[str, float]]] = []
    for count in counts:
        print(f"-- {count} worker(s)", file=sys.stderr, flush=True)
        f = await writepath.measure(
            seconds=args.seconds, clients=args.clients, tenant_count=1, full=False, workers=count
        )
        row = {
            "ceiling": f["bare"].per_s,
            "submit": f["submit_one"].per_s,
            "submit_x": f["submit_one"].per_s / f["bare"].per_s,
            "submit_cpu": f["submit_one"].cpu_us,
            "complete": f["complete_one"].per_s,
            "complete_x": f["complete_one"].per_s / f["bare"].per_s,
            "complete_cpu": f["complete_one"].cpu_us,
            "bad": f["submit_one"].bad + f["complete_one"].bad,
        }
        for rate in rates:
            got = await receipt.through_hookrelay("serve", rate, 10, workers=count)
            row[f"p50_{rate:g}"], row[f"p99_{rate:g}"] = got.p50, got.p99
            row[f"cpu_{rate:g}"] = got.cpu_us
        runs.append((count, row))
    # Repeated counts (--counts 1,2,1,2) alternate, so drift on a shared machine
    # affects both; each count's figure is then the median of its runs.
    medians = {
        count: {k: statistics.median(r[k] for c, r in runs if c == count) for k in runs[0][1]}
        for count in dict.fromkeys(counts)
    }
    first = medians[counts[0]]
    head = (
        "| workers | submit/s (× ceiling) | API CPU µs/submit | complete/s (× ceiling) "
        "| API CPU µs/complete |"
        + "".join(f" serve {r:g}/s p50 / p99 ms | serve CPU µs/task at {r:g}/s |" for r in rates)
    )
    repeated = len(counts) > len(medians)
    lines = [
        f"{args.clients} clients, one tenant; {args.seconds:g} s per write figure, 10 s per "
        f"rate; this machine: {supervisor.usable_cpus()} usable CPUs"
        + ("; each count's row is the median of its runs" if repeated else ""),
        "",
        head,
        "|---" * (5 + 2 * len(rates)) + "|",
    ]
    for count, row in medians.items():
        cells = [
            str(count),
            f"{_cell(row['submit'])} ({row['submit_x']:.2f})",
            _cell(row["submit_cpu"]),
            f"{_cell(row['complete'])} ({row['complete_x']:.2f})",
            _cell(row["complete_cpu"]),
        ]
        for r in rates:
            cells += [
                f"{_cell(row[f'p50_{r:g}'], '.1f')} / {_cell(row[f'p99_{r:g}'], '.1f')}",
                _cell(row[f"cpu_{r:g}"]),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    for count, row in list(medians.items())[1:]:
        cells = [
            f"{count} ÷ {counts[0]}",
            f"{row['submit_x'] / first['submit_x']:.2f}",
            f"{row['submit_cpu'] / first['submit_cpu']:.2f}",
            f"{row['complete_x'] / first['complete_x']:.2f}",
            f"{row['complete_cpu'] / first['complete_cpu']:.2f}",
        ]
        for r in rates:
            cells += [
                f"{row[f'p50_{r:g}'] / first[f'p50_{r:g}']:.2f} / "
                f"{row[f'p99_{r:g}'] / first[f'p99_{r:g}']:.2f}",
                f"{row[f'cpu_{r:g}'] / first[f'cpu_{r:g}']:.2f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    bad = sum(int(row["bad"]) for _, row in runs)
    lines += ["", f"non-2xx answers or errors in the write figures: {bad}", ""]
    table = "\n".join(lines)
    print(table)
    record(
        "Workers: api and serve by HOOKRELAY_WORKERS",
        f"python -m bench workers --counts {args.counts} --seconds {args.seconds:g} "
        f"--clients {args.clients} --rates {args.rates}",
        table,
    )
