"""Hostile receivers on loopback, end to end: whatever they send costs them an attempt.

A fault judged ours is given back unspent, and an outcome that cannot be
stored is never recorded: either way the event would be retried forever, no
attempt charged, nothing in its log, never dead. Each answer here comes from
a raw TCP server (tests/rawreceiver.py), as no HTTP library would write it.
"""

from __future__ import annotations

from dataclasses import replace

import asyncpg
import pytest

from outbox.dispatcher import Dispatcher, running
from outbox.models import EventId
from service.runtime import Runtime

from .rawreceiver import RawReceiver
from .support import backlog, dispatcher, wait_drained

pytestmark = pytest.mark.anyio

MAX_ATTEMPTS = 2

# Every text the local-fault classifier ever matched, and what our own errnos
# read like: a receiver may put any of them in its status line or headers.
PHRASES = [
    b"Session is closed",
    b"Connector is closed",
    b"Connector is closed.",
    b"Too many open files",
    b"[Errno 24] Too many open files",
    b"Too many open files in system",
    b"Cannot assign requested address",
    b"[Errno 99] Cannot assign requested address",
    b"No buffer space available",
    b"Cannot allocate memory",
    b"pool_closed: Session is closed",
]


def phrase_answer(path: str) -> bytes:
    """The phrase in a status line or a header value, then the connection closed
    before the headers end (what made aiohttp quote them in its error)."""
    _, where, i = path.split("/")
    phrase = PHRASES[int(i)]
    if where == "status":
        return b"HTTP/1.1 500 " + phrase + b"\r\n"
    if where == "header":
        return b"HTTP/1.1 500 Internal Server Error\r\nX-Error: " + phrase + b"\r\n"
    if where == "both":
        return b"HTTP/1.1 503 " + phrase + b"\r\nRetry-After: 0\r\nX-Error: " + phrase
    raise AssertionError(path)


async def deliver_all(
    pool: asyncpg.Pool, runtime: Runtime, rx: RawReceiver, paths: list[str]
) -> tuple[Dispatcher, dict[str, EventId]]:
    """One event per path, dispatched under a small attempt budget until none is left."""
    rt = replace(runtime, settings=replace(runtime.settings, max_attempts=MAX_ATTEMPTS))
    tenant, events = None, {}
    for path in paths:
        tenant, [event_id] = await backlog(pool, rt, rx.url(path), 1, tenant)
        events[path] = event_id
    async with running(dispatcher(rt, pool)) as d:
        await wait_drained(pool, timeout=60)
    return d, events


async def attempt_log(pool: asyncpg.Pool) -> dict[str, list[asyncpg.Record]]:
    rows = await pool.fetch("SELECT * FROM delivery_attempts ORDER BY event_id, number")
    log: dict[str, list[asyncpg.Record]] = {}
    for row in rows:
        log.setdefault(row["event_id"], []).append(row)
    return log


async def test_quoted_local_fault_phrases_cost_the_receiver_its_budget(pool, runtime) -> None:
    paths = [f"/{where}/{i}" for where in ("status", "header", "both") for i in range(len(PHRASES))]
    rx = await RawReceiver(phrase_answer).start()
    try:
        d, events = await deliver_all(pool, runtime, rx, paths)
    finally:
        await rx.stop()
    assert d.counters["local_faults"] == 0
    log = await attempt_log(pool)
    dead = {r["event_id"]: r for r in await pool.fetch("SELECT * FROM dead_letters")}
    for path, event_id in events.items():
        assert rx.hits[path] == MAX_ATTEMPTS, path
        assert [a["outcome"] for a in log[event_id]] == ["retry", "dead"], path
        assert all(a["error"] for a in log[event_id]), path
        assert event_id in dead and dead[event_id]["attempts"] == MAX_ATTEMPTS, path
