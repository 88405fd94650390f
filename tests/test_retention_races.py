"""Retention racing a redelivery or a dead-letter replay of the same event (issue 31, part 5).

The sweeper purges a finished task (with its stored event) and an old attempt log
while a partner redelivers that task's event or an operator replays its dead letter.
Whichever commits first, nothing answers 500: the event is either put back and
delivered, or refused cleanly (404, 409); and no outbox row is ever left pointing at
a purged task or at a stored event that is gone.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import httpx
import pytest

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.ops.dead_letters import replay_one
from hookrelay.outbox.ops.retention import purge
from hookrelay.outbox.store import retention as store
from hookrelay.outbox.tasks.redelivery import redeliver
from tests.receiver import Receiver
from tests.support import ADMIN, backlog, bearer, dispatcher, wait_drained

pytestmark = pytest.mark.anyio

DAYS_30, DAYS_90 = 30 * 86400, 90 * 86400


async def age(pool: asyncpg.Pool) -> None:
    """Every finished task 100 days old and every attempt 40: all past retention."""
    await pool.execute("UPDATE tasks SET completed_at = now() - interval '100 days'")
    await pool.execute("UPDATE delivery_attempts SET attempted_at = now() - interval '40 days'")


async def orphans(pool: asyncpg.Pool) -> tuple[int, int]:
    """Outbox rows whose task is gone, and outbox rows whose stored event is gone."""
    row = await pool.fetchrow("""
        SELECT count(*) FILTER (WHERE o.task_id IS NOT NULL AND t.id IS NULL),
               count(*) FILTER (WHERE e.event_id IS NULL)
          FROM outbox o LEFT JOIN tasks t ON t.id = o.task_id
          LEFT JOIN events e ON e.event_id = o.event_id""")
    return row[0], row[1]


async def delivered(pool, runtime, rx: Receiver, n: int) -> list[str]:
    """Deliver what waits; the receiver's event ids."""
    async with running(dispatcher(runtime, pool)):
        await rx.wait_for(n)
        await wait_drained(pool)
    return rx.event_ids()


async def test_a_redelivery_holding_the_task_keeps_it_from_the_purge(pool, runtime) -> None:
    rx = await Receiver().start()
    try:
        _, [event] = await backlog(pool, runtime, rx.url, 1)
        await delivered(pool, runtime, rx, 1)
        await age(pool)
        task_id = await pool.fetchval("SELECT id FROM tasks")
        async with pool.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            # The redelivery has put the event back; its transaction has not committed.
            await redeliver(conn, task_id, tenant_id=None, by="test")
            purging = asyncio.create_task(
                purge(pool, attempts_older_than_s=DAYS_30, tasks_older_than_s=DAYS_90)
            )
            done, _ = await asyncio.wait({purging}, timeout=2)
            await tx.commit()
        # The purge did not wait for the redelivery; it left the task it held alone.
        assert done, "the purge waited on the redelivery's row lock"
        _, tasks, _, _, _ = await purging
        assert tasks == 0
        assert await orphans(pool) == (0, 0)
        # The next purge sees the event pending again and leaves it too.
        assert (await purge(pool, attempts_older_than_s=DAYS_30, tasks_older_than_s=DAYS_90))[
            1
        ] == 0
        assert await delivered(pool, runtime, rx, 2) == [event, event]
    finally:
        await rx.stop()
    assert await pool.fetchval("SELECT delivery_status FROM tasks") == "delivered"


async def test_a_purge_that_took_the_task_first_makes_the_redelivery_a_404(
    pool, runtime, client: httpx.AsyncClient
) -> None:
    tenant, _ = await backlog(pool, runtime, "http://127.0.0.1:9/h", 1)
    await pool.execute("DELETE FROM outbox")
    await pool.execute("UPDATE tasks SET delivery_status = 'delivered'")
    await age(pool)
    task_id = await pool.fetchval("SELECT id FROM tasks")
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        assert await store.purge_tasks(conn, before=await conn.fetchval("SELECT now()"), limit=10)
        asking = asyncio.create_task(
            client.post(f"/v1/tasks/{task_id}/redeliver", headers=bearer(tenant.api_key))
        )
        await asyncio.sleep(0.3)  # the redelivery waits on the purge's row lock
        await tx.commit()
    r = await asking
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "not_found"
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0


async def dead_and_old(pool: asyncpg.Pool, runtime, url: str):
    """One task whose event died long ago: an open dead letter and its attempt log."""
    tenant, [event] = await backlog(pool, runtime, url, 1)
    await pool.execute("""
        INSERT INTO delivery_attempts (event_id, task_id, tenant_id, number, attempted_at,
                                       duration_ms, outcome, status_code)
        SELECT event_id, task_id, tenant_id, 1, now(), 1, 'dead', 410 FROM outbox""")
    await pool.execute("""
        INSERT INTO dead_letters (event_id, tenant_id, task_id, event_type, callback_url,
                                  host, body, created_at, attempts, last_status_code)
        SELECT o.event_id, o.tenant_id, o.task_id, o.event_type, o.callback_url, o.host,
               e.body, o.created_at, 1, 410
          FROM outbox o JOIN events e USING (event_id)""")
    await pool.execute("DELETE FROM outbox")
    await pool.execute("UPDATE tasks SET delivery_status = 'dead', delivery_attempts = 1")
    await age(pool)
    return tenant, event


async def test_an_open_dead_letter_keeps_its_task_for_the_replay(
    pool, runtime, client: httpx.AsyncClient
) -> None:
    """A purged task's dead letter, replayed, would put back an event whose task is gone:
    a task whose letter is open is kept past retention, with its event and its log."""
    rx = await Receiver().start()
    try:
        _, event = await dead_and_old(pool, runtime, rx.url)
        assert await purge(pool, attempts_older_than_s=DAYS_30, tasks_older_than_s=DAYS_90) == (
            0,
            0,
            0,
            0,
            0,
        )
        async with pool.acquire() as conn:
            # The replay holds the letter and the task; a purge runs meanwhile.
            tx = conn.transaction()
            await tx.start()
            await replay_one(conn, event, by="test")
            purged = await asyncio.wait_for(
                purge(pool, attempts_older_than_s=DAYS_30, tasks_older_than_s=DAYS_90), 2
            )
            await tx.commit()
        assert purged[1] == 0
        assert await orphans(pool) == (0, 0)
        # Replayed once; a second replay of the same letter is refused cleanly.
        r = await client.post(f"/v1/admin/dead-letters/{event}/replay", headers=ADMIN)
        assert r.status_code == 409, r.text
        assert await delivered(pool, runtime, rx, 1) == [event]
    finally:
        await rx.stop()
    assert await pool.fetchval("SELECT delivery_status FROM tasks") == "delivered"
    # Delivered and past retention now: the next purge takes the task, its event and log.
    await age(pool)
    assert (await purge(pool, attempts_older_than_s=DAYS_30, tasks_older_than_s=DAYS_90))[:2] == (
        2,
        1,
    )


@pytest.mark.parametrize("how", ["redeliver", "replay"])
async def test_many_races_answer_cleanly_and_leave_no_orphan(
    pool, runtime, client: httpx.AsyncClient, how: str
) -> None:
    """Forty finished, old tasks, each put back through the API while purges run: every
    answer is 202 or a clean refusal, and what was put back is delivered."""
    rx = await Receiver().start()
    n = 40
    try:
        if how == "redeliver":
            tenant, events = await backlog(pool, runtime, rx.url, n)
            await delivered(pool, runtime, rx, n)
            rx.received.clear()
            await age(pool)
        else:
            events = []
            for _ in range(n):
                tenant, event = await dead_and_old(pool, runtime, rx.url)
                events.append(event)
        rows = await pool.fetch("SELECT id, event_id FROM tasks")
        task_ids, events = [r["id"] for r in rows], [r["event_id"] for r in rows]

        async def put_back(i: int) -> httpx.Response:
            if how == "redeliver":
                return await client.post(
                    f"/v1/tasks/{task_ids[i]}/redeliver", headers=bearer(tenant.api_key)
                )
            return await client.post(f"/v1/admin/dead-letters/{events[i]}/replay", headers=ADMIN)

        async def purging() -> None:
            for _ in range(20):
                async with pool.acquire() as conn:
                    now = await conn.fetchval("SELECT now()")
                    await store.purge_tasks(conn, before=now, limit=3)
                    await store.purge_attempts(conn, before=now, limit=3)

        answers, *_ = await asyncio.gather(
            asyncio.gather(*(put_back(i) for i in range(n))), purging(), purging()
        )
        codes = [r.status_code for r in answers]
        assert set(codes) <= {202, 404, 409}, [r.text for r in answers if r.status_code >= 500]
        assert await orphans(pool) == (0, 0)
        put = sorted(e for e, c in zip(events, codes, strict=True) if c == 202)
        assert await delivered(pool, runtime, rx, len(put)) is not None
        assert sorted(rx.event_ids()) == put
    finally:
        await rx.stop()
    print(f"\n{how} racing purges: {codes.count(202)} put back, {codes.count(404)} refused (404)")


async def test_an_event_whose_stored_body_is_gone_is_dropped_not_retried(
    pool, runtime, caplog
) -> None:
    """What the race left before these fixes: an outbox row whose task and stored event
    were purged under it. It failed its attempt every second for ever; it is dropped."""
    rx = await Receiver().start()
    try:
        _, [gone, kept] = await backlog(pool, runtime, rx.url, 2)
        await pool.execute("DELETE FROM tasks WHERE event_id = $1", gone)
        await pool.execute("DELETE FROM events WHERE event_id = $1", gone)
        with caplog.at_level(logging.ERROR, logger="hookrelay.dispatcher"):
            async with running(dispatcher(runtime, pool)) as d:
                await wait_drained(pool)
        assert d.counters["abandoned"] == 1 and not d.counters["local_faults"]
        assert rx.event_ids() == [kept]
    finally:
        await rx.stop()
    assert "event dropped: its stored event is gone" in caplog.text
    assert await pool.fetchval("SELECT count(*) FROM dead_letters") == 0
