"""complete_task and friends: one transaction with the caller, state machine in SQL."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from hookrelay.outbox import complete_task, start_task
from hookrelay.outbox.errors import InvalidTransition, TaskNotFound
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tasks.transitions import cancel_task, timeout_task
from hookrelay.outbox.tenants import create_tenant

pytestmark = pytest.mark.anyio


@pytest.fixture
async def task_id(pool: asyncpg.Pool, runtime) -> str:
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "t", runtime.secret_box)
        task, _ = await create_task(
            conn, tenant.id, NewTask(type="demo", callback_url="http://127.0.0.1:9/hook")
        )
    return task.id


async def outbox_rows(pool: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await pool.fetch(
        "SELECT * FROM outbox WHERE task_id = $1", task_id
    )
    return rows


async def test_complete_writes_task_and_outbox_row(pool: asyncpg.Pool, task_id: str) -> None:
    async with pool.acquire() as conn:
        task = await complete_task(conn, task_id, "succeeded", result={"answer": 42})
    assert task.status == "succeeded" and task.version == 2 and task.completed_at
    assert task.delivery_status == "pending" and str(task.event_id).startswith("evt_")
    rows = await outbox_rows(pool, task_id)
    assert len(rows) == 1
    row = rows[0]
    assert row["event_id"] == task.event_id and row["event_type"] == "task.succeeded"
    assert row["host"] == "http://127.0.0.1:9"
    stored = await pool.fetchrow("SELECT * FROM events WHERE event_id = $1", task.event_id)
    assert (stored["task_id"], stored["tenant_id"]) == (task_id, task.tenant_id)
    body = json.loads(stored["body"])
    assert body["type"] == stored["event_type"] == "task.succeeded"
    assert body["data"]["id"] == task_id and body["data"]["result"] == {"answer": 42}
    assert body["data"] == {k: v for k, v in task.to_resource().items() if k != "delivery"}
    assert body["timestamp"] == body["data"]["completedAt"]


async def test_error_in_callers_transaction_rolls_back_both(pool: asyncpg.Pool, task_id: str):
    async with pool.acquire() as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await complete_task(conn, task_id, "failed", error={"code": "x"})
                raise RuntimeError("executor crashed after completing")
    row = await pool.fetchrow("SELECT status, version FROM tasks WHERE id = $1", task_id)
    assert (row["status"], row["version"]) == ("queued", 1)
    assert await outbox_rows(pool, task_id) == []
    assert await pool.fetchval("SELECT count(*) FROM events WHERE task_id = $1", task_id) == 0


async def test_commits_with_callers_own_write(pool: asyncpg.Pool, task_id: str) -> None:
    async with pool.acquire() as conn:
        await conn.execute("CREATE TEMP TABLE business (v int)")
        async with conn.transaction():
            await conn.execute("INSERT INTO business VALUES (1)")
            await complete_task(conn, task_id, "succeeded")
        assert await conn.fetchval("SELECT count(*) FROM business") == 1
    assert len(await outbox_rows(pool, task_id)) == 1


async def test_concurrent_completions_exactly_one_wins(pool: asyncpg.Pool, task_id: str) -> None:
    gate = asyncio.Event()

    async def attempt(status: str) -> str:
        async with pool.acquire() as conn:
            await gate.wait()
            try:
                await complete_task(conn, task_id, status)  # type: ignore[arg-type]
                return "won"
            except InvalidTransition:
                return "lost"

    runners = [asyncio.create_task(attempt(s)) for s in ("succeeded", "failed") * 4]
    await asyncio.sleep(0.05)
    gate.set()
    outcomes = await asyncio.gather(*runners)
    assert sorted(outcomes).count("won") == 1
    assert len(await outbox_rows(pool, task_id)) == 1


async def test_terminal_is_final(pool: asyncpg.Pool, task_id: str) -> None:
    async with pool.acquire() as conn:
        await cancel_task(conn, task_id)
        with pytest.raises(InvalidTransition) as info:
            await complete_task(conn, task_id, "succeeded")
        assert info.value.current.status == "cancelled"
        with pytest.raises(InvalidTransition):
            await start_task(conn, task_id)
        with pytest.raises(InvalidTransition):
            await timeout_task(conn, task_id)
    assert len(await outbox_rows(pool, task_id)) == 1


async def test_start_then_complete(pool: asyncpg.Pool, task_id: str) -> None:
    async with pool.acquire() as conn:
        running = await start_task(conn, task_id)
        assert running.status == "running" and running.event_id is None
        assert await outbox_rows(pool, task_id) == []
        with pytest.raises(InvalidTransition):
            await start_task(conn, task_id)
        done = await timeout_task(conn, task_id)
    assert done.status == "timed_out" and done.version == 3
    assert [r["event_type"] for r in await outbox_rows(pool, task_id)] == ["task.timed_out"]


async def test_unknown_task(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        with pytest.raises(TaskNotFound):
            await complete_task(conn, "task_nope", "succeeded")


async def test_other_tenant_cannot_cancel(pool: asyncpg.Pool, task_id: str, runtime) -> None:
    async with pool.acquire() as conn:
        other = await create_tenant(conn, "other", runtime.secret_box)
        with pytest.raises(TaskNotFound):
            await cancel_task(conn, task_id, tenant_id=other.id)


async def test_rejects_non_terminal_status(pool: asyncpg.Pool, task_id: str) -> None:
    async with pool.acquire() as conn:
        with pytest.raises(ValueError):
            await complete_task(conn, task_id, "running")  # type: ignore[arg-type]


async def test_commit_notifies_dispatchers(pool: asyncpg.Pool, dsn: str, task_id: str) -> None:
    listener = await asyncpg.connect(dsn)
    got: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("hookrelay_outbox", lambda *a: got.put_nowait(a[2]))
    try:
        async with pool.acquire() as conn:
            await complete_task(conn, task_id, "succeeded")
        await asyncio.wait_for(got.get(), 2)
    finally:
        await listener.close()


async def test_heartbeat_timeout_without_a_heartbeat_setting(pool: asyncpg.Pool, task_id) -> None:
    # An executor may call it on a task submitted without heartbeatTimeoutSeconds.
    async with pool.acquire() as conn:
        await start_task(conn, task_id)
        task = await timeout_task(conn, task_id, "heartbeat")
    assert task.status == "timed_out"
    assert task.error["code"] == "heartbeat_timeout"
    assert task.error["message"].startswith("no start or progress report: ")
