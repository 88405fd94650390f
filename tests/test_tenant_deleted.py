"""A tenant deleted with events in flight (issue 31, part 5).

Our peers' users saw work go on for an owner that was deleted (Svix #1511). There is
no route that deletes a tenant: an operator deletes its row (``DELETE FROM tenants``),
and its tasks, keys and secrets go with it (ON DELETE CASCADE). Migration 0017 makes
the rest go too: its waiting outbox rows, stored events and dead letters. What was in
flight when it went is not recorded (its row is gone); nothing of it is sent again,
and the dispatcher goes on for everyone else. A tenant whose signing keys vanished
gets its events dead-lettered, saying so; before, it made every claim round fail.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.tenants import create_tenant
from tests.receiver import Receiver
from tests.support import backlog, dispatcher, eventually, wait_drained

pytestmark = pytest.mark.anyio


def holding(release: asyncio.Event):
    async def hold(request: web.Request, rx: Receiver) -> web.StreamResponse:
        await release.wait()
        return web.Response(status=204)

    return hold


async def left_of(pool, tenant_id: str) -> dict[str, int]:
    counts = {}
    for table in ("tasks", "outbox", "events", "dead_letters", "signing_secrets"):
        counts[table] = await pool.fetchval(
            f"SELECT count(*) FROM {table} WHERE tenant_id = $1", tenant_id
        )
    return counts


async def test_a_tenant_deleted_mid_flight_takes_its_work_and_the_rest_flows(
    pool, runtime, caplog
) -> None:
    release = asyncio.Event()
    held = await Receiver(behaviour=holding(release)).start()
    rx = await Receiver().start()
    try:
        # More of its work waits (due in an hour, never claimed here), and a dead letter.
        gone, waiting = await backlog(pool, runtime, held.url, 2)
        await pool.execute("UPDATE outbox SET next_attempt_at = now() + interval '1 hour'")
        await pool.execute(
            """INSERT INTO dead_letters (event_id, tenant_id, task_id, event_type,
                                         callback_url, host, body, created_at, attempts)
               SELECT 'evt_dead', tenant_id, NULL, 'ping', callback_url, host, '{}',
                      now(), 1 FROM outbox LIMIT 1"""
        )
        _, gone_events = await backlog(pool, runtime, held.url, 3, gone)
        async with pool.acquire() as conn:
            other = await create_tenant(conn, "other", runtime.secret_box)
        with caplog.at_level(logging.WARNING, logger="hookrelay"):
            async with running(dispatcher(runtime, pool)) as d:
                await held.wait_for(3)  # all three in flight, the receiver holding them
                await pool.execute("DELETE FROM tenants WHERE id = $1", gone.id)
                assert await left_of(pool, gone.id) == dict.fromkeys(
                    ("tasks", "outbox", "events", "dead_letters", "signing_secrets"), 0
                )
                release.set()
                # The rest flows: another tenant's events are delivered meanwhile.
                _, others = await backlog(pool, runtime, rx.url, 5, other)
                await rx.wait_for(5)
                await wait_drained(pool)
                await eventually(lambda: d.counters["stale"] == 3)
    finally:
        release.set()
        await held.stop()
        await rx.stop()
    # What was in flight was sent once and its outcome refused (its row is gone); what
    # waited was never sent.
    assert sorted(held.event_ids()) == sorted(gone_events)
    assert not set(waiting) & set(held.event_ids())
    assert sorted(rx.event_ids()) == sorted(others)
    assert d.counters["delivered"] == 5
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not problems, problems


async def test_a_tenant_whose_signing_keys_vanished_is_dead_lettered_saying_so(
    pool, runtime, caplog
) -> None:
    rx = await Receiver().start()
    try:
        keyless, events = await backlog(pool, runtime, rx.url, 3)
        async with pool.acquire() as conn:
            other = await create_tenant(conn, "other", runtime.secret_box)
        _, others = await backlog(pool, runtime, rx.url, 3, other)
        await pool.execute("DELETE FROM signing_secrets WHERE tenant_id = $1", keyless.id)
        with caplog.at_level(logging.WARNING, logger="hookrelay"):
            async with running(dispatcher(runtime, pool)) as d:
                await wait_drained(pool, timeout=10)
    finally:
        await rx.stop()
    assert sorted(rx.event_ids()) == sorted(others)
    letters = await pool.fetch("SELECT event_id, last_error FROM dead_letters")
    assert sorted(r["event_id"] for r in letters) == sorted(events)
    assert all(r["last_error"] == "the tenant has no active signing key" for r in letters)
    assert d.counters["no_signing_key"] == 3 and not d.counters["undecryptable"]
    assert "claim round failed" not in caplog.text


async def test_rows_of_a_tenant_deleted_before_0017_are_dropped(pool, runtime, caplog) -> None:
    """A tenant deleted without the trigger (before migration 0017) left its outbox rows
    behind; the migration removes them, and a dispatcher that meets one drops it."""
    rx = await Receiver().start()
    try:
        gone, _ = await backlog(pool, runtime, rx.url, 2)
        async with pool.acquire() as conn:
            other = await create_tenant(conn, "other", runtime.secret_box)
        _, others = await backlog(pool, runtime, rx.url, 2, other)
        await pool.execute("ALTER TABLE tenants DISABLE TRIGGER tenants_forgotten")
        await pool.execute("DELETE FROM tenants WHERE id = $1", gone.id)
        await pool.execute("ALTER TABLE tenants ENABLE TRIGGER tenants_forgotten")
        assert (await left_of(pool, gone.id))["outbox"] == 2
        with caplog.at_level(logging.ERROR, logger="hookrelay.dispatcher"):
            async with running(dispatcher(runtime, pool)) as d:
                await wait_drained(pool, timeout=10)
    finally:
        await rx.stop()
    assert sorted(rx.event_ids()) == sorted(others)
    assert d.counters["abandoned"] == 2
    assert await pool.fetchval("SELECT count(*) FROM dead_letters") == 0
    assert caplog.text.count("event dropped: its tenant was deleted") == 2
