"""Retention: only finished, old rows are purged; live work and replayable history stay."""

from __future__ import annotations

import asyncio

import pytest

from hookrelay.outbox.ops import retention
from hookrelay.outbox.ops.retention import purge
from hookrelay.outbox.store import changes as change_log
from hookrelay.outbox.tasks.test_events import send_test_event
from hookrelay.outbox.tenants import create_tenant
from tests.support import backlog

pytestmark = pytest.mark.anyio


async def test_purges_only_old_finished_rows(pool, runtime, monkeypatch) -> None:
    monkeypatch.setattr(retention, "BATCH", 2)  # several small batches
    _, events = await backlog(pool, runtime, "http://127.0.0.1:9/h", 6)
    # Events 0-3 delivered long ago, 4 dead (unreplayed), 5 still in the outbox.
    async with pool.acquire() as conn:
        await conn.execute("""
            INSERT INTO delivery_attempts (event_id, task_id, tenant_id, number, attempted_at,
                                           duration_ms, outcome)
            SELECT event_id, task_id, tenant_id, 1, now() - interval '40 days', 1, 'delivered'
              FROM outbox""")
        await conn.execute(
            """
            INSERT INTO dead_letters (event_id, tenant_id, task_id, event_type, callback_url,
                                      host, body, created_at, attempts)
            SELECT o.event_id, o.tenant_id, o.task_id, o.event_type, o.callback_url, o.host,
                   e.body, o.created_at, 1
              FROM outbox o JOIN events e USING (event_id) WHERE o.event_id = $1""",
            events[4],
        )
        await conn.execute("DELETE FROM outbox WHERE event_id <> $1", events[5])
        await conn.execute(
            """UPDATE tasks SET delivery_status = 'delivered',
                              completed_at = now() - interval '100 days' WHERE event_id <> $1""",
            events[5],
        )
        await conn.execute(
            "UPDATE tasks SET delivery_status = 'dead' WHERE event_id = $1", events[4]
        )
    attempts, tasks, _, changes, _ = await purge(
        pool, attempts_older_than_s=30 * 86400, tasks_older_than_s=90 * 86400
    )
    assert attempts == 4 and tasks == 4
    assert changes == 0  # the stream log keeps a day by default
    left = {r["event_id"] for r in await pool.fetch("SELECT event_id FROM delivery_attempts")}
    assert left == {events[4], events[5]}
    # The dead one stays with its open letter, for a replay to find.
    left = {r["event_id"] for r in await pool.fetch("SELECT event_id FROM tasks")}
    assert left == {events[4], events[5]}
    # A purged task's stored event goes with it.
    left = {r["event_id"] for r in await pool.fetch("SELECT event_id FROM events")}
    assert left == {events[4], events[5]}
    assert await purge(pool, attempts_older_than_s=1, tasks_older_than_s=1) == (0, 0, 0, 0, 0)


async def test_purges_finished_old_test_events_only(pool, runtime) -> None:
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "pings", runtime.secret_box)
        sent = [await send_test_event(conn, tenant.id, "http://127.0.0.1:9/h") for _ in range(4)]
        # 0 and 1 delivered long ago, 2 dead long ago (still replayable), 3 old but still waiting.
        await conn.execute(
            "UPDATE events SET created_at = now() - interval '40 days' WHERE task_id IS NULL"
        )
        await conn.execute(
            """
            INSERT INTO dead_letters (event_id, tenant_id, task_id, event_type, callback_url,
                                      host, body, created_at, attempts)
            SELECT o.event_id, o.tenant_id, o.task_id, o.event_type, o.callback_url, o.host,
                   e.body, o.created_at, 1
              FROM outbox o JOIN events e USING (event_id) WHERE o.event_id = $1""",
            sent[2],
        )
        await conn.execute("DELETE FROM outbox WHERE event_id = ANY($1::text[])", sent[:3])
    _, _, pings, _, _ = await purge(pool, attempts_older_than_s=30 * 86400, tasks_older_than_s=1)
    assert pings == 2
    left = {r["event_id"] for r in await pool.fetch("SELECT event_id FROM events")}
    assert left == {sent[2], sent[3]}


async def test_a_backlog_past_retention_goes_in_one_round_not_ten_batches(
    pool, runtime, monkeypatch
) -> None:
    """Ten batches a round fell behind a busy change log: a round now goes on until what
    is past retention is gone (or its time is spent)."""
    monkeypatch.setattr(retention, "BATCH", 2)
    await backlog(pool, runtime, "http://127.0.0.1:9/h", 15)  # 30 changes: 15 batches
    async with pool.acquire() as conn:
        await change_log.number_pending(conn)
        await conn.execute("UPDATE task_changes SET changed_at = now() - interval '2 days'")
    *_, purged, _ = await purge(pool, attempts_older_than_s=86400, tasks_older_than_s=86400 * 90)
    assert purged == 30
    assert await pool.fetchval("SELECT count(*) FROM task_changes") == 0


async def test_a_purge_passes_over_rows_another_purge_holds(pool, runtime) -> None:
    """Every dispatcher's sweeper purges: a batch takes rows no other purge holds
    instead of waiting on its row locks, and leaves those rows to it."""
    _, events = await backlog(pool, runtime, "http://127.0.0.1:9/h", 4)
    async with pool.acquire() as conn:
        await conn.execute("""
            INSERT INTO delivery_attempts (event_id, task_id, tenant_id, number, attempted_at,
                                           duration_ms, outcome)
            SELECT event_id, task_id, tenant_id, 1, now() - interval '40 days', 1, 'delivered'
              FROM outbox""")
        await conn.execute("DELETE FROM outbox")
        await conn.execute("""UPDATE tasks SET delivery_status = 'delivered',
                                             completed_at = now() - interval '100 days'""")
        await change_log.number_pending(conn)
        await conn.execute("UPDATE task_changes SET changed_at = now() - interval '2 days'")
    held = events[:2]
    async with pool.acquire() as other, other.transaction():
        # Another purge's batch, still open: it holds the rows of two of the events.
        for statement in (
            "SELECT 1 FROM tasks WHERE event_id = ANY($1::text[]) FOR UPDATE",
            "SELECT 1 FROM delivery_attempts WHERE event_id = ANY($1::text[]) FOR UPDATE",
            """SELECT 1 FROM task_changes c JOIN tasks t ON t.id = c.task_id
                WHERE t.event_id = ANY($1::text[]) FOR UPDATE OF c""",
        ):
            await other.execute(statement, held)
        purged = await asyncio.wait_for(
            purge(pool, attempts_older_than_s=30 * 86400, tasks_older_than_s=90 * 86400), 5
        )
        # Two changes (submitted, succeeded) of each task not held.
        assert purged == (2, 2, 0, 4, 0)
        left = {r["event_id"] for r in await pool.fetch("SELECT event_id FROM tasks")}
        assert left == set(held)
    # Once the other purge is done with them, the next round takes the rest.
    again = await purge(pool, attempts_older_than_s=30 * 86400, tasks_older_than_s=90 * 86400)
    assert again == (2, 2, 0, 4, 0)
