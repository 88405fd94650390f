"""Coalesced: one run for a burst of pokes, a retry after a failure, and a clean stop."""

from __future__ import annotations

import asyncio

import pytest

from hookrelay.service.live import coalesce
from hookrelay.service.live.coalesce import Coalesced
from tests.support import eventually

pytestmark = pytest.mark.anyio


async def test_pokes_during_a_run_share_the_next_one() -> None:
    runs: list[int] = []
    gate = asyncio.Event()

    async def work() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            await gate.wait()

    c = Coalesced(work, name="test")
    c.poke()
    await eventually(lambda: runs == [0])
    for _ in range(10):  # while the first run is held
        c.poke()
    gate.set()
    await eventually(lambda: runs == [0, 1])
    await asyncio.sleep(0.05)
    assert runs == [0, 1]
    await c.stop()


async def test_a_poke_after_a_quiet_spell_runs_at_once_and_a_stream_shares_one_run() -> None:
    runs: list[float] = []
    loop = asyncio.get_running_loop()

    async def work() -> None:
        runs.append(loop.time())

    c = Coalesced(work, name="test", spacing_s=0.2)
    poked = loop.time()
    c.poke()
    await eventually(lambda: runs)
    assert runs[0] - poked < 0.1  # no wait before the first run
    for _ in range(5):  # within the spacing: one more run, once it has passed
        c.poke()
        await asyncio.sleep(0.001)
    await eventually(lambda: len(runs) == 2)
    await asyncio.sleep(0.3)
    assert len(runs) == 2
    assert runs[1] - runs[0] >= 0.2 - 0.01
    await c.stop()


async def test_a_failed_run_is_retried(monkeypatch) -> None:
    monkeypatch.setattr(coalesce, "RETRY_S", 0.01)
    calls: list[int] = []

    async def work() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionResetError("the database went away")

    c = Coalesced(work, name="test")
    c.poke()
    await eventually(lambda: len(calls) == 2)
    await c.stop()


async def test_no_run_after_stop() -> None:
    calls: list[int] = []

    async def work() -> None:
        calls.append(1)

    c = Coalesced(work, name="test")
    await c.stop()
    c.poke()
    await asyncio.sleep(0.05)
    assert calls == []
