"""LISTEN that survives its connection: reconnects, reports the gap, hears NOTIFY again."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import asyncpg
import pytest

from outbox.dispatcher import running
from outbox.listener import Listener

from .dispatching import backlog, dispatcher, wait_drained

pytestmark = pytest.mark.anyio
KILL_OTHERS = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


async def _until(check, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_reconnects_and_hears_again(dsn: str) -> None:
    heard: list[str] = []
    gaps: list[float] = []
    listener = Listener(dsn, "hookrelay_test", heard.append, on_gap=lambda: gaps.append(1))
    await listener.start()
    other = await asyncpg.connect(dsn)
    try:
        await _until(lambda: listener.connected)
        await other.execute("SELECT pg_notify('hookrelay_test', 'one')")
        await _until(lambda: heard == ["one"])
        assert await other.fetchval(KILL_OTHERS) >= 1
        await _until(lambda: len(gaps) >= 3)  # connect, loss, reconnect
        await _until(lambda: listener.connected)
        await other.execute("SELECT pg_notify('hookrelay_test', 'two')")
        await _until(lambda: heard == ["one", "two"])
    finally:
        await other.close()
        await listener.stop()


async def test_dispatcher_wakes_on_notify_after_its_listen_was_killed(  # type: ignore[no-untyped-def]
    pool, runtime, receiver, dsn
) -> None:
    # A poll interval far longer than the test: only a NOTIFY can deliver in time.
    slow_poll = replace(runtime, settings=replace(runtime.settings, poll_interval_s=60))
    killer = await asyncpg.connect(dsn)
    try:
        async with running(dispatcher(slow_poll, pool)):
            await asyncio.sleep(0.5)
            assert (
                await killer.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"
                )
                >= 1
            )
            await killer.fetchval(KILL_OTHERS)
            await asyncio.sleep(2.0)  # the listener's back-off, then it reconnects
            started = time.monotonic()
            await backlog(pool, slow_poll, receiver.url, 3)
            await wait_drained(pool, timeout=10)
            assert time.monotonic() - started < 5
    finally:
        await killer.close()
    assert len(receiver.received) == 3
