"""Deduplication in the receiver's own PostgreSQL transaction (hookrelay.receiver.postgres),
through asyncpg and psycopg 3, with the table created from the documented DDL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import psycopg
import pytest

from hookrelay.receiver.postgres import DDL, AsyncpgSeen, AsyncPsycopgSeen, PsycopgSeen
from tests.support import eventually

pytestmark = pytest.mark.anyio


@pytest.fixture
async def receiver_db(pool: asyncpg.Pool) -> asyncpg.Pool:
    """The receiver's database: the DDL (run twice: it is idempotent) and its own table."""
    await pool.execute(DDL)
    await pool.execute(DDL)
    await pool.execute("CREATE TABLE orders (event_id text)")
    return pool


async def test_the_id_commits_with_the_work_or_not_at_all(receiver_db) -> None:
    async with receiver_db.acquire() as conn:

        async def receive(webhook_id: str, fail: bool = False) -> bool:
            async with conn.transaction():
                fresh = await AsyncpgSeen(conn).add(webhook_id)
                if fresh:
                    await conn.execute("INSERT INTO orders VALUES ($1)", webhook_id)
                if fail:
                    raise RuntimeError("the work failed")
            return fresh

        with pytest.raises(RuntimeError):
            await receive("evt_1", fail=True)
        assert await receive("evt_1") is True  # rolled back above: done now
        assert await receive("evt_1") is False  # a duplicate: nothing done
    assert await receiver_db.fetchval("SELECT count(*) FROM orders") == 1


async def test_a_concurrent_duplicate_waits_then_is_seen(receiver_db) -> None:
    first, second = await receiver_db.acquire(), await receiver_db.acquire()
    try:
        tx = first.transaction()
        await tx.start()
        assert await AsyncpgSeen(first).add("evt_2")

        async def duplicate() -> bool:
            async with second.transaction():
                return await AsyncpgSeen(second).add("evt_2")

        racing = asyncio.create_task(duplicate())
        pid = second.get_server_pid()

        async def waiting_on_the_row() -> bool:
            sql = "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1"
            return bool(await receiver_db.fetchval(sql, pid) == "Lock")

        await eventually(waiting_on_the_row, what="the duplicate waits for the first")
        assert not racing.done()
        await tx.commit()
        assert await racing is False
    finally:
        await receiver_db.release(first)
        await receiver_db.release(second)


async def test_discard_and_purge(receiver_db) -> None:
    async with receiver_db.acquire() as conn:
        seen = AsyncpgSeen(conn)
        assert await seen.add("evt_3") and await seen.add("evt_4")
        await seen.discard("evt_3")
        assert await seen.add("evt_3")
        await conn.execute(
            "UPDATE hookrelay_seen_webhooks SET received_at = now() - interval '40 days'"
            " WHERE webhook_id = 'evt_4'"
        )
        assert await seen.purge_before(datetime.now(UTC) - timedelta(days=30)) == 1
        assert await seen.add("evt_4")


async def test_psycopg_connections_sync_and_async(receiver_db, dsn) -> None:
    def sync_side() -> list[bool]:
        with psycopg.connect(dsn) as conn:
            seen = PsycopgSeen(conn)
            out = [seen.add("evt_5"), seen.add("evt_5")]
            seen.discard("evt_5")
            out.append(seen.add("evt_5"))
            out.append(seen.purge_before(datetime.now(UTC) + timedelta(seconds=1)) == 1)
            conn.commit()
            return out

    assert await asyncio.to_thread(sync_side) == [True, False, True, True]
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        seen = AsyncPsycopgSeen(conn)
        assert [await seen.add("evt_6"), await seen.add("evt_6")] == [True, False]
        await seen.discard("evt_6")
        assert await seen.add("evt_6")
        assert await seen.purge_before(datetime.now(UTC) + timedelta(seconds=1)) == 1
        await conn.rollback()
    assert await receiver_db.fetchval("SELECT count(*) FROM hookrelay_seen_webhooks") == 0


async def test_a_table_of_your_own_name_and_only_a_plain_name(receiver_db) -> None:
    await receiver_db.execute(
        "CREATE SCHEMA rx; CREATE TABLE rx.seen (LIKE hookrelay_seen_webhooks INCLUDING ALL)"
    )
    async with receiver_db.acquire() as conn:
        assert await AsyncpgSeen(conn, table="rx.seen").add("evt_7")
    assert await receiver_db.fetchval("SELECT webhook_id FROM rx.seen") == "evt_7"
    for bad in ("seen; DROP TABLE orders", "a.b.c", '"quoted"', ""):
        with pytest.raises(ValueError, match="plain table name"):
            AsyncpgSeen(None, table=bad)
