"""Past one machine: 1..3 dispatcher hosts, a host lost, a host cut off, PostgreSQL failovers.

Hosts are network namespaces on this machine (bench/netns.py); needs root and iproute2.

    python -m bench cluster [--events 30000] [--hosts 1,2,3] [--only scale,lost,...]

Scenarios: ``scale`` (drain over 1, 2, 3 hosts), ``lost`` (SIGKILL of a host mid-drain),
``partition`` (a host cut from PostgreSQL past its leases), ``failover`` (primary
SIGKILLed, synchronous standby promoted), ``vanish`` (the same with the primary's link
down first, as when its machine is gone), ``async`` (SIGKILL, asynchronous standby) and
``rpo`` (the asynchronous standby cut off 3 s first, then SIGKILL: what is lost, and what
the partner's reconciliation through the status listing gets back).
The scale table goes to docs/operations/benchmarks.md, the rest to reliability.md beside it
(with ``--record``).
"""

from __future__ import annotations

import argparse
import sys

from bench import clusterruns as runs
from bench.clusterhosts import cluster
from bench.common import RELIABILITY, RELIABILITY_HEADER, record
from bench.netns import unavailable

SCENARIOS = ("scale", "lost", "partition", "failover", "vanish", "async", "rpo")
FAULTS = ("lost", "partition", "failover", "vanish", "async")  # one table
RPO_LAG_S = 3.0  # the standby cut off this long before the primary dies


def scale_table(results: list[runs.ScaleRun]) -> str:
    base = results[0].rate
    lines = [
        "| app hosts | delivered/s | vs one | delivered by each | requests | distinct "
        "| attempt rows | highest attempt | PostgreSQL CPU ms per 1,000 "
        "| dispatcher CPU ms per 1,000 | WAL bytes per delivery |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        each = " + ".join(f"{n:,}" for n in r.per_host)
        lines.append(
            f"| {r.hosts} | {r.rate:,.0f} | {r.rate / base:.2f} | {each} | {r.ledger.requests:,} "
            f"| {r.ledger.unique:,} | {r.ledger.attempt_rows:,} | {r.max_number} "
            f"| {r.pg_ms_per_1000:,.0f} | {r.dispatch_ms_per_1000:,.0f} "
            f"| {r.wal_bytes / r.events:,.0f} |"
        )
    clean = all(
        r.ledger.requests == r.ledger.unique == r.ledger.attempt_rows == r.events
        and r.max_number == 1
        and r.ledger.lost == 0
        for r in results
    )
    pg = min(r.pg_ms_per_1000 for r in results)
    lines += [
        "",
        f"no event lost or attempted twice in any configuration: {'yes' if clean else 'NO'}",
        "",
        "PostgreSQL CPU is user + system time of every process in its namespace (ended "
        "backends included, through the postmaster's reaped-children times), from the "
        "dispatchers' start to the empty outbox. All hosts share this machine's 2 cores "
        f"with PostgreSQL and the receiver, so the rate is the machine's: at {pg:,.0f} ms "
        f"per 1,000 deliveries one PostgreSQL core would feed about {1_000_000 / pg:,.0f} "
        "deliveries/s (a projection; docs/operations/scaling.md).",
        "",
    ]
    return "\n".join(lines)


def lost_rows(r: runs.LostHost) -> list[str]:
    g = r.ledger
    return [
        f"| host lost mid-drain: SIGKILL of every process in h2's namespace (api + dispatch) "
        f"after it delivered {r.delivered_before_kill:,}; lease {r.lease_s:g} s "
        f"| {r.events:,} events over 3 hosts, receiver answering after 0.2 s "
        f"| lost {g.lost}; {g.requests:,} requests for {g.unique:,} events = {g.duplicates} "
        f"duplicates, bound: {r.leased_at_kill} rows h2 held leased; outbox empty "
        f"{r.seconds_to_empty:.1f} s after the kill; no attempt number twice "
        f"({g.numbers_twice}); h2 restarted as it was, delivered {r.rejoined_deliveries} "
        "of the next events |"
    ]


def partition_rows(r: runs.Partition) -> list[str]:
    g = r.ledger
    cut = r.counters["h1"]
    return [
        f"| host cut from PostgreSQL: h1's database link down {r.seconds_cut:.1f} s "
        f"(lease {r.lease_s:g} s) while it held {r.leased_at_cut} leases, its edge link up "
        f"| {r.events:,} events over 3 hosts, receiver answering after 0.3 s "
        f"| fencing refused {cut['stale']} of h1's outcomes (stale); lost {g.lost}; "
        f"{g.requests:,} requests = {g.attempt_rows:,} attempt rows + {r.stale} refused; "
        f"no event delivered twice in the log ({g.delivered_twice}), no attempt number "
        f"twice ({g.numbers_twice}); after the link came back h1 delivered "
        f"{r.rejoined_deliveries} new events |"
    ]


def failover_rows(r: runs.Failover, how: str) -> list[str]:
    g = r.ledger
    ready = ", ".join(f"{s:.2f}" for s in r.api_ready_s)
    write = ", ".join(f"{s:.2f}" for s in r.api_write_s)
    return [
        f"| PostgreSQL failover, {r.mode} standby: {how}, then `pg_ctl promote` "
        f"{r.outage_s:.1f} s later | 3 hosts, `DATABASE_URL` listing both servers with "
        f"`target_session_attrs=read-write`, 9 clients submitting and completing "
        f"| /readyz 503 on {len(r.ready_503)} of 3 APIs while no server was writable, 200 "
        f"again {ready} s after the promotion; first 2xx write per API {write} s after; "
        f"first webhook of a new event {r.delivery_s:.2f} s after; "
        f"{r.submitted_ok:,} submits and {r.completed_ok:,} completes answered 2xx, lost "
        f"{r.lost_submits} and {r.lost_completes}; committed events undelivered "
        f"{g.lost}; duplicates {g.duplicates} (bound: {r.leased_at_failover} rows leased on "
        f"the standby); busiest process {r.busiest_cpu_share:.1%} CPU while no primary; "
        f"no process exited (exit codes at SIGTERM: {sorted(set(r.exit_codes))}) |"
    ]


def rpo_rows(r: runs.Failover) -> list[str]:
    g, rec = r.ledger, r.reconciled
    assert rec is not None
    return [
        f"| asynchronous replication loss: the standby's link down {r.lag_s:g} s (replication "
        f"lag), traffic going on, then the primary SIGKILLed and the standby promoted "
        f"{r.outage_s:.1f} s later | 3 hosts, 9 clients submitting and completing "
        f"| {r.acked_in_lag:,} writes answered 2xx while the standby was cut off; lost with "
        f"the primary (RPO): {r.lost_submits} submits and {r.lost_completes} completes, i.e. "
        f"{r.lost_submits + r.lost_completes} of the {r.submitted_ok + r.completed_ok:,} "
        f"writes answered 2xx; webhooks the receiver had for events the promoted server no "
        f"longer holds: {g.forgotten}; delivered again because their outcome was lost: "
        f"{g.duplicates}. The partner's reconciliation (status listing of {rec.listed:,} "
        f"tasks against its records) found {rec.missing} tasks missing and {rec.regressed} "
        f"completed ones unfinished, submitted {rec.resubmitted} again and completed "
        f"{rec.recompleted} again (all 2xx); the receiver then had {rec.delivered} of those "
        f"{rec.recompleted} webhooks; committed events undelivered at the end: {g.lost} |"
    ]


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=30000)
    p.add_argument("--hosts", default="1,2,3")
    p.add_argument("--only", default=",".join(SCENARIOS))
    args = p.parse_args()
    if why := unavailable():
        sys.exit(f"cannot build the cluster here: {why}")
    only = set(args.only.split(","))
    command = f"python -m bench cluster --events {args.events}"
    if "scale" in only:
        hosts = [int(n) for n in args.hosts.split(",")]
        async with cluster(apps=max(hosts)) as c:
            results = [await runs.scale(c, args.events, n) for n in hosts]
        table = scale_table(results)
        print(table)
        record("cluster: dispatcher hosts", f"{command} --only scale", table)
    rows: list[str] = []
    if "lost" in only:
        async with cluster(apps=3) as c:
            rows += lost_rows(await runs.lost_host(c, args.events))
    if "partition" in only:
        async with cluster(apps=3) as c:
            rows += partition_rows(await runs.partition(c, max(300, args.events // 15)))
    n = max(200, args.events // 30)
    for name, mode, vanish, how in (
        ("failover", "sync", False, "primary SIGKILLed"),
        ("vanish", "sync", True, "primary's link down and SIGKILLed (its machine gone)"),
        ("async", "async", False, "primary SIGKILLed"),
    ):
        if name in only:
            async with cluster(apps=3, standby=mode) as c:
                rows += failover_rows(await runs.failover(c, before=n, after=n, vanish=vanish), how)
    if rows:
        table = "\n".join(["| fault | load | outcome |", "|---|---|---|", *rows, ""])
        print(table)
        record(
            "cluster: hosts lost, cut off, failed over",
            f"{command} --only {','.join(s for s in FAULTS if s in only)}",
            table,
            file=RELIABILITY,
            header=RELIABILITY_HEADER,
        )
    if "rpo" in only:
        async with cluster(apps=3, standby="async") as c:
            run = await runs.failover(c, before=n, after=n, lag_s=RPO_LAG_S)
        table = "\n".join(["| fault | load | outcome |", "|---|---|---|", *rpo_rows(run), ""])
        print(table)
        record(
            "cluster: asynchronous replication loss",
            f"{command} --only rpo",
            table,
            file=RELIABILITY,
            header=RELIABILITY_HEADER,
        )
