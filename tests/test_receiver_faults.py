"""Receiver faults end to end, each handled per the delivery rules with memory bounded."""

from __future__ import annotations

import asyncio
import gzip
import resource
import time
from dataclasses import replace

import pytest
from aiohttp import web

from hookrelay.outbox.dispatch.dispatcher import running
from tests.receiver import Receiver
from tests.support import backlog, dispatcher, wait_drained

pytestmark = pytest.mark.anyio


async def _one_event(pool, runtime, rx: Receiver, **settings):
    """Deliver one event under ``settings``; returns its attempt rows and the dead letter."""
    rt = replace(runtime, settings=replace(runtime.settings, **settings))
    _, [event_id] = await backlog(pool, rt, rx.url, 1)
    async with running(dispatcher(rt, pool)):
        await wait_drained(pool, timeout=30)
    attempts = await pool.fetch(
        "SELECT * FROM delivery_attempts WHERE event_id = $1 ORDER BY number", event_id
    )
    dead = await pool.fetchrow("SELECT * FROM dead_letters WHERE event_id = $1", event_id)
    return attempts, dead


async def test_receiver_that_never_answers_times_out_and_retries(pool, runtime, receiver) -> None:
    async def silent(request: web.Request, rx: Receiver) -> web.StreamResponse:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    receiver.behaviour = silent
    attempts, dead = await _one_event(pool, runtime, receiver, http_timeout_s=0.5, max_attempts=2)
    assert [a["outcome"] for a in attempts] == ["retry", "dead"]
    assert all("timed out after 0.5s" in a["error"] for a in attempts)
    assert dead is not None and "gave up after 2 attempts" in dead["last_error"]


async def test_connection_reset_is_retried(pool, runtime, receiver) -> None:
    async def reset_once(request: web.Request, rx: Receiver) -> web.StreamResponse:
        if len(rx.received) == 1:
            assert request.transport is not None
            request.transport.abort()
        return web.Response(status=204)

    receiver.behaviour = reset_once
    attempts, dead = await _one_event(pool, runtime, receiver)
    assert [a["outcome"] for a in attempts] == ["retry", "delivered"] and dead is None
    assert "ServerDisconnected" in attempts[0]["error"] or "reset" in attempts[0]["error"].lower()


async def test_fifty_megabyte_answer_is_read_to_the_cap_only(pool, runtime, receiver) -> None:
    fifty = b"z" * (50 * 1024 * 1024)

    async def huge(request: web.Request, rx: Receiver) -> web.StreamResponse:
        resp = web.StreamResponse(status=200)
        await resp.prepare(request)
        for i in range(0, len(fifty), 1 << 20):
            await resp.write(fifty[i : i + (1 << 20)])
        return resp

    receiver.behaviour = huge
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    attempts, dead = await _one_event(pool, runtime, receiver, max_response_bytes=65_536)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert [a["outcome"] for a in attempts] == ["delivered"] and dead is None
    assert attempts[0]["response_prefix"].startswith("zzz")
    # The receiver's own 50 MB is already counted in `before`; reading it all would add 50 more.
    assert grown_mb < 20, f"peak RSS grew by {grown_mb:.0f} MB"


async def test_gzip_bomb_is_capped(pool, runtime, receiver) -> None:
    bomb = gzip.compress(b"\0" * (200 * 1024 * 1024))

    async def gz(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=200, body=bomb, headers={"Content-Encoding": "gzip"})

    receiver.behaviour = gz
    started = time.monotonic()
    attempts, _ = await _one_event(pool, runtime, receiver, max_response_bytes=10_000)
    assert attempts[0]["outcome"] == "delivered" and time.monotonic() - started < 10


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_redirect_to_private_address_is_not_followed(pool, runtime, receiver, status) -> None:
    async def redirect(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=status, headers={"Location": "http://169.254.169.254/latest"})

    receiver.behaviour = redirect
    attempts, dead = await _one_event(pool, runtime, receiver, max_attempts=2)
    assert len(receiver.received) == 2, "exactly the two attempts, nothing followed"
    assert [a["outcome"] for a in attempts] == ["retry", "dead"]
    expected = f"redirect {status} to http://169.254.169.254/latest not followed"
    assert expected in attempts[0]["error"]
    assert dead is not None


async def test_500s_for_a_while_then_200(pool, runtime, receiver) -> None:
    async def recovering(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=500 if len(rx.received) <= 4 else 200)

    receiver.behaviour = recovering
    attempts, dead = await _one_event(pool, runtime, receiver, max_attempts=8)
    assert [a["status_code"] for a in attempts] == [500, 500, 500, 500, 200]
    assert attempts[-1]["outcome"] == "delivered" and dead is None
    # Equal jitter: each wait at least half its step, so attempts never bunch up.
    gaps = [
        (b["attempted_at"] - a["attempted_at"]).total_seconds()
        for a, b in zip(attempts, attempts[1:], strict=False)
    ]
    assert all(g > 0 for g in gaps)
