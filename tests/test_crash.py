"""Crash safety: kill -9 a dispatcher process mid-batch; a second one finishes, nothing is lost."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import Counter

import pytest
from aiohttp import web

from tests.receiver import Receiver
from tests.support import backlog, dispatcher_env, start_dispatcher, wait_drained

# Each test kills or restarts processes and waits for them: seconds each.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]
EVENTS = 500


async def test_kill_9_mid_batch_loses_nothing(pool, runtime, dsn) -> None:
    async def slow(request: web.Request, rx: Receiver) -> web.StreamResponse:
        await asyncio.sleep(0.05)
        return web.Response(status=204)

    rx = await Receiver(behaviour=slow).start()
    try:
        _, events = await backlog(pool, runtime, rx.url, EVENTS)
        env = dispatcher_env(runtime, dsn)
        first = await start_dispatcher(env)
        await rx.wait_for(100, timeout=60)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        leased = await pool.fetchval("SELECT count(*) FROM outbox WHERE lease_token IS NOT NULL")
        assert leased > 0, "the kill should have left rows leased mid-batch"
        second = await start_dispatcher(env)
        try:
            await wait_drained(pool, timeout=120)
        finally:
            second.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(second.communicate(), 30)
        assert second.returncode == 0, err.decode()[-2000:]
    finally:
        await rx.stop()
    received = Counter(rx.event_ids())
    assert set(received) == set(events), "an event was lost"
    duplicates = sum(n - 1 for n in received.values())
    print(
        f"\ncrash test: {EVENTS} events, {len(rx.received)} requests, "
        f"{leased} leased at the kill, {duplicates} duplicates"
    )
    # Duplicates can only come from rows that were leased (in flight) at the kill.
    assert duplicates <= leased
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0
    undelivered = "SELECT count(*) FROM tasks WHERE delivery_status <> 'delivered'"
    assert await pool.fetchval(undelivered) == 0
    dupes = await pool.fetchval(
        "SELECT count(*) FROM (SELECT 1 FROM delivery_attempts GROUP BY event_id, number "
        "HAVING count(*) > 1) d"
    )
    assert dupes == 0


async def test_sigterm_exits_cleanly_and_releases(pool, runtime, dsn) -> None:
    release = asyncio.Event()

    async def hang(request: web.Request, rx: Receiver) -> web.StreamResponse:
        await asyncio.wait_for(release.wait(), 5)
        return web.Response(status=204)

    rx = await Receiver(behaviour=hang).start()
    try:
        await backlog(pool, runtime, rx.url, 20)
        env = {**dispatcher_env(runtime, dsn), "HOOKRELAY_LOG_LEVEL": "INFO"}
        proc = await start_dispatcher(env)
        await rx.wait_for(5, timeout=30)
        proc.send_signal(signal.SIGTERM)
        release.set()
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()[-2000:]
        assert b'"msg": "dispatcher stopped"' in err and b'"counters"' in err
    finally:
        release.set()
        await rx.stop()
    assert await pool.fetchval("SELECT count(*) FROM outbox WHERE lease_token IS NOT NULL") == 0


async def test_random_kills_over_many_rounds_lose_nothing(pool, runtime, dsn) -> None:
    """kill -9 at random moments (claiming, mid-POST, writing outcomes), round after round."""
    import random

    rng = random.Random(20261202)
    answered: Counter[str] = Counter()  # 2xx answers per event id

    async def flaky(request: web.Request, rx: Receiver) -> web.StreamResponse:
        await asyncio.sleep(rng.random() * 0.02)
        if rng.random() < 0.2:
            return web.Response(status=500)
        answered[request.headers["webhook-id"]] += 1
        return web.Response(status=204)

    rx = await Receiver(behaviour=flaky).start()
    leased_at_kills = 0
    try:
        _, events = await backlog(pool, runtime, rx.url, 800)
        env = dispatcher_env(runtime, dsn, max_attempts="50")
        for _ in range(6):
            if not await pool.fetchval("SELECT count(*) FROM outbox"):
                break  # a fast round finished the work: nothing left to interrupt
            proc = await start_dispatcher(env)
            seen = len(rx.received)
            with contextlib.suppress(AssertionError):  # ...unless nothing is due just now
                await rx.wait_for(seen + 1, timeout=20)  # it is working...
            await asyncio.sleep(rng.uniform(0.0, 0.4))  # ...somewhere in its cycle
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            leased_at_kills += await pool.fetchval(
                "SELECT count(*) FROM outbox WHERE lease_token IS NOT NULL"
            )
        last = await start_dispatcher(env)
        try:
            await wait_drained(pool, timeout=120)
        finally:
            last.send_signal(signal.SIGTERM)
            await asyncio.wait_for(last.communicate(), 30)
    finally:
        await rx.stop()
    dead = {r["event_id"] for r in await pool.fetch("SELECT event_id FROM dead_letters")}
    assert set(answered) | dead == set(events), "an event was neither delivered nor dead-lettered"
    duplicates = sum(n - 1 for n in answered.values())
    print(
        f"\nrandom kills: {len(events)} events, {leased_at_kills} leased at kills, "
        f"{duplicates} duplicate deliveries, {len(dead)} dead"
    )
    assert duplicates <= leased_at_kills, "a duplicate that no crash explains"
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0
    assert (
        await pool.fetchval(
            "SELECT count(*) FROM (SELECT 1 FROM delivery_attempts GROUP BY event_id, number "
            "HAVING count(*) > 1) d"
        )
        == 0
    )
