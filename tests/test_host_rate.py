"""HOOKRELAY_PER_HOST_RATE: the shared token buckets, a dispatcher held by one, and three
``hookrelay dispatch`` processes together within the rate (outbox/dispatch/host_rate.py)."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from dataclasses import replace

import pytest

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.dispatch.host_rate import HostRate, _share
from hookrelay.outbox.store import delivery
from hookrelay.service.server.prerequisites import Runtime
from tests.harness.waiting import eventually
from tests.receiver import Receiver
from tests.support import backlog, dispatcher, dispatcher_env, start_dispatcher, wait_drained

pytestmark = pytest.mark.anyio
# So slow that no token refills while a test runs: the bucket holds one, and grants
# are exact.
CRAWL = 0.0001


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        HostRate(0)
    rate = HostRate(200)
    assert rate.burst == 20 and rate.wait_s == 0.05
    assert HostRate(0.5).wait_s == 0.5 and HostRate(0.5).burst == 1


def test_share_takes_turns_between_a_hosts_lanes() -> None:
    a, b, c = ("h", "a"), ("h", "b"), ("h", "c")
    asked = Counter({a: 5, b: 1, c: 5})
    assert _share(1, [a, b, c], asked, 0) == Counter({a: 1})
    assert _share(1, [a, b, c], asked, 1) == Counter({b: 1})
    assert _share(4, [a, b, c], asked, 0) == Counter({a: 2, b: 1, c: 1})
    assert _share(100, [a, b, c], asked, 2) == asked
    assert _share(0, [a, b, c], asked, 0) == Counter()


async def test_buckets_are_shared_and_unused_tokens_go_back(pool) -> None:
    rate = HostRate(CRAWL)
    async with pool.acquire() as conn:
        got, limited = await rate.take(conn, Counter({("h1", "t"): 5, ("h2", "t"): 1}))
        assert got == Counter({("h1", "t"): 1, ("h2", "t"): 1}) and limited == {"h1"}
        # Another dispatcher, the same buckets: nothing left.
        other = HostRate(CRAWL)
        got, limited = await other.take(conn, Counter({("h1", "t"): 1}))
        assert got == Counter() and limited == {"h1"}
        # h2's token was not used (no row claimed): back into its bucket.
        await rate.give_back(conn, Counter({("h2", "t"): 1}), [])
        got, limited = await other.take(conn, Counter({("h2", "t"): 1}))
        assert got == Counter({("h2", "t"): 1}) and not limited
        assert await rate.take(conn, Counter({("h1", "t"): 0})) == (Counter(), set())
        tokens = await conn.fetchval("SELECT tokens FROM host_rates WHERE host = 'h2'")
        assert tokens < 1
        # A bucket never holds more than its size.
        await delivery.return_host_tokens(conn, unused={"h2": 50}, burst=rate.burst)
        assert await conn.fetchval("SELECT tokens FROM host_rates WHERE host = 'h2'") == 1


async def test_held_events_wait_unspent(pool, runtime: Runtime, receiver) -> None:
    """At a crawl, the bucket's one token sends one event; the others stay due with no
    attempt spent, and the dispatcher waits rather than asking again in a loop."""
    limited = replace(runtime, settings=replace(runtime.settings, per_host_rate=CRAWL))
    await backlog(pool, runtime, receiver.url, 3)
    d = dispatcher(limited, pool)
    async with running(d):
        await receiver.wait_for(1)
        await eventually(lambda: d.counters["rate_limited"] >= 1, 10)
    assert len(receiver.received) == 1
    rows = await pool.fetch("SELECT attempts, budget_used, lease_token FROM outbox")
    assert len(rows) == 2 and all(r["attempts"] == 0 and r["budget_used"] == 0 for r in rows)
    assert all(r["lease_token"] is None for r in rows)
    # Without the rate, the same dispatcher sends them at once.
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
    assert len(receiver.received) == 3


async def test_a_held_host_does_not_hold_up_another(pool, runtime: Runtime, receiver) -> None:
    limited = replace(runtime, settings=replace(runtime.settings, per_host_rate=CRAWL))
    tenant, _ = await backlog(pool, runtime, receiver.url, 3)
    other = await Receiver().start()
    try:
        d = dispatcher(limited, pool)
        async with running(d):
            await receiver.wait_for(1)
            await eventually(lambda: d.counters["rate_limited"] >= 1, 10)
            # Another host's event, committed while the first host is held: sent.
            await backlog(pool, runtime, other.url, 1, tenant)
            d.wake()
            await other.wait_for(1)
            # The first host's hold ends and is looked at again: still nothing to grant.
            await eventually(lambda: d.counters["rate_limited"] >= 2, 10)
    finally:
        await other.stop()
    assert len(receiver.received) == 1 and len(other.received) == 1


async def test_no_rate_no_bucket(pool, runtime, receiver) -> None:
    await backlog(pool, runtime, receiver.url, 3)
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
    assert await pool.fetchval("SELECT count(*) FROM host_rates") == 0


@pytest.mark.slow
async def test_three_dispatch_processes_share_one_rate(pool, runtime, dsn) -> None:
    """Three ``hookrelay dispatch`` processes at 10 requests/s to one host. Checked from
    the receiver's clock, loosely: no second holds more than the rate plus the bucket's
    burst, with room for requests a loaded machine bunched (twice that); and the whole
    backlog took at least as long as the rate allows (a slow machine only adds time)."""
    rate, events = 10, 40
    rx = await Receiver().start()
    procs = []
    try:
        _, sent = await backlog(pool, runtime, rx.url, events)
        env = dispatcher_env(runtime, dsn, per_host_rate=str(rate))
        procs = [await start_dispatcher(env) for _ in range(3)]
        await rx.wait_for(events, timeout=120)
        await wait_drained(pool)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            await asyncio.wait_for(proc.communicate(), 30)
        await rx.stop()
    assert set(rx.event_ids()) == set(sent)
    times = sorted(r.at for r in rx.received)
    burst = HostRate(rate).burst
    # The first request may be any time after start; from it on, the bucket refills.
    assert times[-1] - times[0] >= (len(times) - burst) / rate * 0.9
    for i, start in enumerate(times):
        in_second = sum(1 for t in times[i:] if t < start + 1.0)
        assert in_second <= 2 * (rate + burst), f"{in_second} requests in one second"
    # Held events cost no attempt: each was delivered on its first.
    assert await pool.fetchval("SELECT max(delivery_attempts) FROM tasks") == 1
