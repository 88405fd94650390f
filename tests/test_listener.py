"""LISTEN that survives its connection: reconnects, reports the gap, hears NOTIFY again."""

from __future__ import annotations

import time
from dataclasses import replace

import asyncpg
import pytest

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.store.listener import Listener
from tests.support import backlog, dispatcher, eventually, wait_drained

pytestmark = pytest.mark.anyio
KILL_OTHERS = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


LISTENING = (
    "SELECT array_agg(pid) FROM pg_stat_activity "
    "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
)


async def test_reconnects_and_hears_again(dsn: str) -> None:
    heard: list[str] = []
    gaps: list[float] = []
    listener = Listener(dsn, {"hookrelay_test": heard.append}, on_gap=lambda: gaps.append(1))
    await listener.start()
    other = await asyncpg.connect(dsn)
    try:
        await eventually(lambda: listener.connected)
        await other.execute("SELECT pg_notify('hookrelay_test', 'one')")
        await eventually(lambda: heard == ["one"])
        assert await other.fetchval(KILL_OTHERS) >= 1
        await eventually(lambda: len(gaps) >= 3)  # connect, loss, reconnect
        await eventually(lambda: listener.connected)
        await other.execute("SELECT pg_notify('hookrelay_test', 'two')")
        await eventually(lambda: heard == ["one", "two"])
    finally:
        await other.close()
        await listener.stop()


async def test_dispatcher_wakes_on_notify_after_its_listen_was_killed(
    pool, runtime, receiver, dsn
) -> None:
    # A poll interval far longer than the test: only a NOTIFY can deliver in time.
    slow_poll = replace(runtime, settings=replace(runtime.settings, poll_interval_s=60))
    killer = await asyncpg.connect(dsn)
    try:
        async with running(dispatcher(slow_poll, pool)):
            killed = set(await eventually(lambda: killer.fetchval(LISTENING)))
            await killer.fetchval(KILL_OTHERS)

            async def listening_again() -> bool:
                # A LISTEN from a new backend: the killed one may linger in the view.
                return bool(set(await killer.fetchval(LISTENING) or []) - killed)

            await eventually(listening_again)
            started = time.monotonic()
            await backlog(pool, slow_poll, receiver.url, 3)
            await wait_drained(pool, timeout=10)
            assert time.monotonic() - started < 5
    finally:
        await killer.close()
    assert len(receiver.received) == 3


async def test_joined_parts_share_one_connection(dsn: str) -> None:
    # Two callbacks of one channel both hear each notification, a third channel's its
    # own, every part's gap runs at connect; one backend listens for all of them.
    a: list[str] = []
    b: list[str] = []
    keys: list[str] = []
    gaps: list[str] = []
    listener = Listener(dsn, {"hookrelay_test": a.append}, on_gap=lambda: gaps.append("a"))
    listener.join({"hookrelay_test": b.append}, on_gap=lambda: gaps.append("b"))
    listener.join({"hookrelay_test_keys": keys.append}, on_gap=lambda: gaps.append("keys"))
    await listener.start()
    other = await asyncpg.connect(dsn)
    try:
        await eventually(lambda: listener.connected)
        assert sorted(gaps) == ["a", "b", "keys"]
        await other.execute("SELECT pg_notify('hookrelay_test', 'one')")
        await other.execute("SELECT pg_notify('hookrelay_test_keys', 'k')")
        await eventually(lambda: a == ["one"] and b == ["one"] and keys == ["k"])
        assert len(await other.fetchval(LISTENING)) == 1
        with pytest.raises(RuntimeError, match="join it before"):
            listener.join({"hookrelay_late": a.append})
    finally:
        await other.close()
        await listener.stop()


async def test_a_failing_part_does_not_deafen_the_others(dsn: str, caplog) -> None:
    # Parts share the connection: one whose callback or gap handler raises is logged,
    # and the others still hear and look again.
    heard: list[str] = []
    gaps: list[int] = []

    def broken(_: str = "") -> None:
        raise RuntimeError("broken part")

    listener = Listener(dsn, {"hookrelay_test": broken}, on_gap=broken)
    listener.join({"hookrelay_test": heard.append}, on_gap=lambda: gaps.append(1))
    await listener.start()
    other = await asyncpg.connect(dsn)
    try:
        await eventually(lambda: listener.connected)
        assert gaps == [1]
        await other.execute("SELECT pg_notify('hookrelay_test', 'one')")
        await eventually(lambda: heard == ["one"])
        assert "a callback on hookrelay_test failed" in caplog.text
        assert "a gap handler failed" in caplog.text
    finally:
        await other.close()
        await listener.stop()
    # Stopped, it takes parts again, and starts again.
    listener.join({"hookrelay_test_more": heard.append})
