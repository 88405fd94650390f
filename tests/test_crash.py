"""Crash safety: kill -9 a dispatcher process mid-batch; a second one finishes, nothing is lost."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter

import pytest
from aiohttp import web

from .conftest import ADMIN_TOKEN, ROOT
from .dispatching import backlog, wait_drained
from .receiver import Receiver

pytestmark = pytest.mark.anyio
EVENTS = 500


def dispatcher_env(runtime, dsn: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    s = runtime.settings
    return {
        **os.environ,
        "DATABASE_URL": dsn,
        "HOOKRELAY_DATA_DIR": str(s.data_dir),
        "HOOKRELAY_ADMIN_TOKEN": ADMIN_TOKEN,
        "HOOKRELAY_MASTER_KEY": s.master_key,
        "HOOKRELAY_ALLOW_PRIVATE_CIDRS": "127.0.0.0/8",
        "HOOKRELAY_ALLOW_HTTP": "true",
        "HOOKRELAY_LEASE_S": "2",
        "HOOKRELAY_HTTP_TIMEOUT_S": "1",
        "HOOKRELAY_RETRY_BASE_S": "0.05",
        "HOOKRELAY_RETRY_CAP_S": "0.2",
        "HOOKRELAY_POLL_INTERVAL_S": "0.1",
        "HOOKRELAY_BATCH_SIZE": "50",
        "HOOKRELAY_PER_HOST_CONCURRENCY": "50",
        "HOOKRELAY_LOG_LEVEL": "WARNING",
    }


async def start_dispatcher(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service.cli", "dispatch", env=env, cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )


async def test_kill_9_mid_batch_loses_nothing(pool, runtime, dsn) -> None:  # type: ignore[no-untyped-def]
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
    print(f"\ncrash test: {EVENTS} events, {len(rx.received)} requests, "
          f"{leased} leased at the kill, {duplicates} duplicates")
    # Duplicates can only come from rows that were leased (in flight) at the kill.
    assert duplicates <= leased
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0
    undelivered = "SELECT count(*) FROM tasks WHERE delivery_status <> 'delivered'"
    assert await pool.fetchval(undelivered) == 0
    dupes = await pool.fetchval(
        "SELECT count(*) FROM (SELECT 1 FROM delivery_attempts GROUP BY event_id, number "
        "HAVING count(*) > 1) d")
    assert dupes == 0


async def test_sigterm_exits_cleanly_and_releases(pool, runtime, dsn) -> None:  # type: ignore[no-untyped-def]
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


