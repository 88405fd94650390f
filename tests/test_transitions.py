"""complete_task and friends: one transaction with the caller, state machine in SQL;
under autocommit (the API), one statement."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import asyncpg
import pytest

from hookrelay.outbox import complete_task, start_task
from hookrelay.outbox.errors import InvalidTransition, TaskNotFound
from hookrelay.outbox.models import iso
from hookrelay.outbox.tasks.progress import report_progress
from hookrelay.outbox.tasks.state_changes import event_body
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


class CountingConnection(asyncpg.Connection):  # type: ignore[misc]
    """Counts the statements sent, BEGIN and COMMIT included (asyncpg sends those
    through ``execute``)."""

    sent: list[str]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sent = []

    async def execute(self, query, *args, **kwargs):
        self.sent.append(query)
        return await super().execute(query, *args, **kwargs)

    async def fetchrow(self, query, *args, **kwargs):
        self.sent.append(query)
        return await super().fetchrow(query, *args, **kwargs)


@pytest.fixture
async def counted(dsn: str):
    conn = await asyncpg.connect(dsn, connection_class=CountingConnection)
    try:
        yield conn
    finally:
        await conn.close()


async def test_autocommit_complete_is_one_statement(
    pool: asyncpg.Pool, task_id: str, counted
) -> None:
    """hookrelay's API: the transition, the event and the outbox row in one round trip,
    committed by it (no BEGIN, no COMMIT), visible to others at once."""
    kept = "SELECT origin, host FROM destination_keys"
    assert [tuple(r) for r in await pool.fetch(kept)] == [  # from the submit
        ("http://127.0.0.1:9", "http://127.0.0.1:9")
    ]
    task = await complete_task(counted, task_id, "failed", error={"code": "x"}, autocommit=True)
    assert len(counted.sent) == 1 and not counted.is_in_transaction()
    assert task.status == "failed" and task.event_id is not None
    rows = await outbox_rows(pool, task_id)
    assert [r["event_id"] for r in rows] == [task.event_id]
    assert rows[0]["host"] == "http://127.0.0.1:9"
    body = await pool.fetchval("SELECT body FROM events WHERE event_id = $1", task.event_id)
    assert json.loads(body)["data"] == {
        k: v for k, v in task.to_resource().items() if k != "delivery"
    }
    # The loser of a race, or a second call, writes nothing: one statement, one guard.
    counted.sent.clear()
    with pytest.raises(InvalidTransition):
        await cancel_task(counted, task_id, autocommit=True)
    assert len(counted.sent) == 2  # the refused statement, then the read for the 409
    assert len(await outbox_rows(pool, task_id)) == 1


async def test_autocommit_start_is_one_statement(task_id: str, counted) -> None:
    task = await start_task(counted, task_id, autocommit=True)
    assert task.status == "running" and len(counted.sent) == 1

    with pytest.raises(TaskNotFound):
        await start_task(counted, "task_nope", autocommit=True)


async def test_task_of_an_older_release_is_completed_in_a_transaction(
    pool: asyncpg.Pool, task_id: str, counted
) -> None:
    """A release before 0018 submits tasks without their destination key: the one
    statement leaves such a task be, and it is completed the older way, with the
    key computed here; nothing is written in between."""
    await pool.execute("DELETE FROM destination_keys")
    task = await complete_task(counted, task_id, "succeeded", result=[1], autocommit=True)
    assert task.status == "succeeded" and not counted.is_in_transaction()
    assert any(q.startswith("BEGIN") for q in counted.sent)  # the older way's transaction
    rows = await outbox_rows(pool, task_id)
    assert [(r["event_id"], r["host"]) for r in rows] == [(task.event_id, "http://127.0.0.1:9")]
    with pytest.raises(InvalidTransition):
        await complete_task(counted, task_id, "failed", autocommit=True)


async def test_event_body_built_in_sql_is_the_one_python_would_write(
    pool: asyncpg.Pool, runtime
) -> None:
    """Every field of the task, strings PostgreSQL and Python escape alike, floats
    written as Python writes them: the bytes equal ``event_body`` of the task."""
    spec = NewTask(
        type="render",
        callback_url="http://127.0.0.1:9/hook?a=1&b=\u00e9",
        input={"text": 'quote " back \\ tab \t nl \n ctl \x01 \u2028 é', "n": [1, 2.5, None]},
        metadata={"order": "A-1", "nested": {"b": True, "a": {}}, "list": []},
        timeout_s=60,
        heartbeat_timeout_s=30,
        on_timeout={"result": {"default": "rejected"}},
    )
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "t", runtime.secret_box)
        task, _ = await create_task(conn, tenant.id, spec)
        await start_task(conn, task.id)
        await report_progress(conn, task.id, 50, "half: done, of it")
        done = await complete_task(conn, task.id, "succeeded", result={"a": "b, c: d"})
        raw = await conn.fetchval("SELECT body FROM events WHERE task_id = $1", task.id)
    assert raw == event_body(done)
    spec2 = NewTask(type="x", callback_url="http://127.0.0.1:9/", heartbeat_timeout_s=0.25)
    async with pool.acquire() as conn:
        task2, _ = await create_task(conn, tenant.id, spec2)
        done2 = await cancel_task(conn, task2.id)
        raw2 = await conn.fetchval("SELECT body FROM events WHERE task_id = $1", task2.id)
    assert raw2 == event_body(done2) and '"heartbeatTimeoutSeconds":0.25' in raw2


async def test_webhook_time_writes_times_as_the_api_does(pool: asyncpg.Pool) -> None:
    for at in (
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
    ):
        assert await pool.fetchval("SELECT webhook_time($1)", at) == iso(at)
    assert await pool.fetchval("SELECT webhook_time(NULL)") is None


async def test_destination_keys_are_kept_by_origin(pool: asyncpg.Pool, runtime) -> None:
    """One row per origin, whatever the path, query or case of the host; submits to a
    known origin add none; each task's outbox row gets its own URL's key."""
    urls = ["http://127.0.0.1:9/a?x=1", "http://127.0.0.1:9/b#f", "http://LOCALHOST:9?q"]
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "t", runtime.secret_box)
        made = [(await create_task(conn, tenant.id, NewTask("x", u)))[0] for u in urls]
        for task in made:
            await complete_task(conn, task.id, "succeeded", autocommit=True)
    rows = await pool.fetch("SELECT origin, host FROM destination_keys ORDER BY origin")
    assert [tuple(r) for r in rows] == [
        ("http://127.0.0.1:9", "http://127.0.0.1:9"),
        ("http://LOCALHOST:9", "http://localhost:9"),
    ]
    hosts = await pool.fetch("SELECT task_id, host FROM outbox")
    assert {r["task_id"]: r["host"] for r in hosts} == {
        made[0].id: "http://127.0.0.1:9",
        made[1].id: "http://127.0.0.1:9",
        made[2].id: "http://localhost:9",
    }
