"""Several hosts on one machine (network namespaces): a host lost, a host cut off, a failover.

Short versions of ``python -m bench cluster``'s scenarios, each asserting what it claims in
counts. They need root and iproute2; without them they skip, except under CI, where
they fail. The figures of the full runs are in docs/operations/reliability.md and
benchmarks.md.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from bench import clusterruns, netns
from bench.clusterhosts import Cluster, cluster

# Each builds namespaces and a PostgreSQL of its own and kills things: seconds each.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _require_namespaces() -> None:
    why = netns.unavailable()
    if why and os.environ.get("CI"):
        pytest.fail(f"CI runs the cluster scenarios as root: {why}")
    if why:
        pytest.skip(why)


@pytest.fixture
async def three_hosts() -> AsyncIterator[Cluster]:
    _require_namespaces()
    async with cluster(apps=3) as c:
        yield c


@pytest.fixture
async def with_standby() -> AsyncIterator[Cluster]:
    _require_namespaces()
    async with cluster(apps=3, standby="sync") as c:
        yield c


async def test_three_hosts_share_a_drain(three_hosts: Cluster) -> None:
    run = await clusterruns.scale(three_hosts, 1500, 3)
    assert run.ledger.lost == 0 and run.ledger.missing == 0
    # No fault: every event attempted once, by exactly one of the hosts.
    assert run.ledger.requests == run.ledger.unique == run.ledger.attempt_rows == 1500
    assert run.max_number == 1 and sum(run.per_host) == 1500
    assert len(run.per_host) == 3


async def test_a_host_lost_mid_drain_loses_nothing(three_hosts: Cluster) -> None:
    run = await clusterruns.lost_host(three_hosts, 600, wave=60)
    print(f"\nlost host: {run}")
    assert run.killed_processes >= 2, "its api and its dispatcher"
    assert run.leased_at_kill > 0, "the kill should have left rows leased"
    ledger = run.ledger
    assert ledger.lost == 0 and ledger.undelivered_tasks == 0
    # A duplicate is an event the lost host had leased and sent but not recorded.
    assert ledger.duplicates <= run.leased_at_kill
    assert ledger.numbers_twice == 0 and ledger.delivered_twice == 0
    assert run.rejoined_deliveries > 0, "back, it takes its share with no operator action"


async def test_a_host_cut_from_postgres_is_fenced(three_hosts: Cluster) -> None:
    run = await clusterruns.partition(three_hosts, 200, wave=100)
    print(f"\npartition: {run}")
    cut = run.counters["h1"]
    assert run.leased_at_cut > 0 and cut["stale"] > 0, "its late outcomes are refused"
    ledger = run.ledger
    assert ledger.lost == 0 and ledger.undelivered_tasks == 0
    assert ledger.numbers_twice == 0 and ledger.delivered_twice == 0
    # The attempt log is true: every request made is in it, unless its outcome was
    # refused as stale; nothing is in it twice.
    assert ledger.requests == ledger.attempt_rows + run.stale == run.outcomes
    assert ledger.duplicates <= run.stale
    assert run.rejoined_deliveries > 0


async def test_failover_to_a_synchronous_standby(with_standby: Cluster) -> None:
    run = await clusterruns.failover(with_standby, before=100, after=100)
    print(f"\nfailover: {run}")
    assert run.ready_503 == ["h1", "h2", "h3"], "/readyz says so while nothing is writable"
    assert run.processes_alive and run.exit_codes == [0] * 6
    assert run.busiest_cpu_share < 0.5, "no process spins while the database is away"
    # Synchronous replication: everything answered 2xx survives the primary.
    assert run.lost_submits == 0 and run.lost_completes == 0
    ledger = run.ledger
    assert ledger.lost == 0 and ledger.undelivered_tasks == 0
    assert ledger.events >= run.completed_ok
    assert ledger.duplicates <= run.leased_at_failover
    assert ledger.numbers_twice == 0 and ledger.delivered_twice == 0
    assert run.failures.keys() <= {"503", "ReadTimeout", "RemoteProtocolError", "ReadError"}


@pytest.mark.skipif(
    not os.environ.get("HOOKRELAY_CLUSTER_FULL"),
    reason="a minute of waiting for dead connections; python -m bench cluster runs it",
)
async def test_failover_when_the_primary_machine_vanishes(with_standby: Cluster) -> None:
    run = await clusterruns.failover(with_standby, before=100, after=100, vanish=True)
    print(f"\nvanished primary: {run}")
    assert run.processes_alive and run.lost_submits == 0 and run.lost_completes == 0
    assert run.ledger.lost == 0 and run.ledger.duplicates <= run.leased_at_failover


@pytest.mark.skipif(
    not os.environ.get("HOOKRELAY_CLUSTER_FULL"),
    reason="a minute of failover and reconciliation; python -m bench cluster --only rpo runs it",
)
async def test_an_asynchronous_standby_loses_its_lag_and_the_partner_reconciles() -> None:
    _require_namespaces()
    async with cluster(apps=3, standby="async") as c:
        run = await clusterruns.failover(c, before=100, after=100, lag_s=2.0)
    print(f"\nasynchronous loss: {run}")
    assert run.processes_alive and run.acked_in_lag > 0
    # Asynchronous replication promises nothing for the lag: what was answered 2xx while
    # the standby was cut off is gone with the primary, and the run counts it.
    assert run.lost_submits + run.lost_completes > 0
    rec = run.reconciled
    assert rec is not None and rec.missing == run.lost_submits
    # Every lost write shows in the listing against the partner's records...
    assert rec.regressed <= run.lost_completes <= rec.regressed + rec.missing
    # ...and once redone, every redone completion's webhook arrives and nothing is left.
    assert rec.resubmitted == rec.missing and rec.delivered == rec.recompleted
    assert run.ledger.lost == 0 and run.ledger.numbers_twice == 0
