"""The executor's functions on every driver: asyncpg, psycopg 3 (async and sync),
SQLAlchemy 2 connections and sessions (async on asyncpg and psycopg, sync on psycopg).

Each connection is made the plain way, with no set-up call of hookrelay's (a bare
``asyncpg.connect()``, a connection of an ``asyncpg.create_pool()`` with no ``init``,
engines from their URL alone); hookrelay's own pool is one kind more.

One body per property, run on each kind: the change commits with the caller's own
write or not at all, two racing completions have one winner, the commit's NOTIFY
wakes a real dispatcher, and a rolled-back progress report leaves nothing.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import asyncpg
import psycopg
import pytest
from sqlalchemy import create_engine

import hookrelay.outbox.sync
from hookrelay import outbox
from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.errors import (
    DatabaseUnavailable,
    InvalidTransition,
    ProgressBackwards,
    TaskNotFound,
)
from hookrelay.outbox.store.drivers import async_driver
from hookrelay.outbox.store.tasks import JSON_COLUMNS
from hookrelay.outbox.tasks.state_changes import event_body
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from tests.executors import BORROWED, KINDS, executors
from tests.support import dispatcher, eventually

pytestmark = pytest.mark.anyio
HOOK = "http://127.0.0.1:9/hook"
kinds = pytest.mark.parametrize("kind", list(KINDS))
LISTENING = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
)
WAITING = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
)


async def new_task(
    pool: asyncpg.Pool, runtime: Any, url: str = HOOK, *, start: bool = False
) -> str:
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "t", runtime.secret_box)
        task, _ = await create_task(conn, tenant.id, NewTask(type="demo", callback_url=url))
        if start:
            await outbox.start_task(conn, task.id)
        await conn.execute("CREATE TABLE IF NOT EXISTS notes (v text)")
    return task.id


async def counts(pool: asyncpg.Pool, task_id: str) -> tuple[int, int, int]:
    """(notes, outbox rows, events rows) as another connection sees them."""
    row = await pool.fetchrow(
        "SELECT (SELECT count(*) FROM notes) AS n,"
        " (SELECT count(*) FROM outbox WHERE task_id = $1) AS o,"
        " (SELECT count(*) FROM events WHERE task_id = $1) AS e",
        task_id,
    )
    return row["n"], row["o"], row["e"]


@kinds
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
async def test_completes_with_the_callers_write_or_not_at_all(
    kind: str, commit: bool, pool, runtime, dsn
) -> None:
    task_id = await new_task(pool, runtime)
    async with executors(kind, dsn) as make:
        ex = await make()
        await ex.begin()
        await ex.write("invoice 1")
        done = await ex.call("complete_task", task_id, "succeeded", result={"n": 1, "s": "é"})
        assert done.status == "succeeded" and done.result == {"n": 1, "s": "é"}
        assert await counts(pool, task_id) == (0, 0, 0)  # nothing seen before the commit
        await (ex.commit() if commit else ex.rollback())
    # The stream change log is queued by a trigger at commit, whatever the driver.
    logged = "SELECT array_agg(version ORDER BY seq) FROM task_changes WHERE task_id = $1"
    async with pool.acquire() as conn:
        await hookrelay.outbox.store.changes.number_pending(conn)
    if not commit:
        assert await counts(pool, task_id) == (0, 0, 0)
        assert await pool.fetchval("SELECT status FROM tasks WHERE id = $1", task_id) == "queued"
        assert await pool.fetchval(logged, task_id) == [1]
        return
    assert await counts(pool, task_id) == (1, 1, 1)
    assert await pool.fetchval(logged, task_id) == [1, 2]
    async with pool.acquire() as conn:
        stored = await hookrelay.outbox.store.tasks.get_task(conn, task_id=task_id)
    assert stored is not None and stored == done  # the Task asyncpg reads: values, time zone
    raw = await pool.fetchval("SELECT body FROM events WHERE task_id = $1", task_id)
    assert raw == event_body(stored)  # the bytes hookrelay's own path would have fixed
    body = json.loads(raw)
    assert body["data"] == done.to_event_data()
    assert body["timestamp"].endswith("Z") and body["data"]["completedAt"] == body["timestamp"]


# JSON of every shape, as an executor's result and error: each stored and read back
# as hookrelay's own pool (jsonb codecs json.dumps/json.loads) stores and reads it.
RESULT = {
    "text": 'é \u2028 "quoted" \\ \t',
    "numbers": [0, -1, 1.5, 1e-07, 2**70],
    "nested": {"b": [True, False, None], "a": {}},
    "zz": [],
}


@kinds
@pytest.mark.parametrize(
    ("result", "error"),
    [(RESULT, "a JSON string"), ([1, "two"], {"code": "x"}), (0, False)],
    ids=["object", "array", "scalars"],
)
async def test_json_of_every_shape_is_written_and_read_alike(
    kind: str, result: Any, error: Any, pool, runtime, dsn
) -> None:
    task_id = await new_task(pool, runtime)
    async with executors(kind, dsn) as make:
        ex = await make()
        await ex.begin()
        done = await ex.call("complete_task", task_id, "failed", result=result, error=error)
        await ex.commit()
    assert (done.result, done.error) == (result, error)
    async with pool.acquire() as conn:  # hookrelay's pool: its own codecs
        row = await conn.fetchrow("SELECT result, error FROM tasks WHERE id = $1", task_id)
        stored = await hookrelay.outbox.store.tasks.get_task(conn, task_id=task_id)
    assert (row["result"], row["error"]) == (result, error)
    assert stored is not None and stored == done
    raw = await pool.fetchval("SELECT body FROM events WHERE task_id = $1", task_id)
    # The database builds the body (queries.sql: finish_task), whatever the driver, and
    # event_body writes the same bytes, but a jsonb number keeps PostgreSQL's spelling
    # (0.0000001 where Python writes 1e-07): the same JSON.
    assert json.loads(raw) == json.loads(event_body(stored))
    if "1e-07" not in event_body(stored):
        assert raw == event_body(stored)


async def test_every_jsonb_column_of_a_task_is_read_as_text(pool) -> None:
    """``_task_as_text`` casts each, so no driver's codec (or lack of one) decides."""
    jsonb = await pool.fetch(
        "SELECT column_name FROM information_schema.columns"
        " WHERE table_name = 'tasks' AND data_type = 'jsonb'"
    )
    assert {r["column_name"] for r in jsonb} == set(JSON_COLUMNS)
    step = hookrelay.outbox.store.tasks.get_step(task_id="task_x")
    assert all(f"{name}::text AS {name}" in step.sql for name in JSON_COLUMNS)


async def test_an_asyncpg_pool_made_with_no_init(pool, runtime, dsn) -> None:
    """Given the pool itself, each call takes one of its connections, in a transaction
    of its own."""
    task_id = await new_task(pool, runtime)
    theirs = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        assert (await outbox.start_task(theirs, task_id)).status == "running"
        seen = await outbox.report_progress(theirs, task_id, 30, "a third")
        assert seen.progress["message"] == "a third"
        done = await outbox.complete_task(theirs, task_id, "succeeded", result={"url": "u"})
        assert done.result == {"url": "u"}
        with pytest.raises(InvalidTransition):
            await outbox.cancel_task(theirs, task_id)
    finally:
        await theirs.close()
    assert await counts(pool, task_id) == (0, 1, 1)
    assert await pool.fetchval("SELECT result FROM tasks WHERE id = $1", task_id) == {"url": "u"}


@kinds
async def test_racing_completions_have_one_winner(kind: str, pool, runtime, dsn) -> None:
    task_id = await new_task(pool, runtime)
    async with executors(kind, dsn) as make:
        first, second = await make(), await make()
        await first.begin()
        await second.begin()
        await first.call("complete_task", task_id, "succeeded")
        # The second waits on the first's row lock, then finds the task terminal.
        late = asyncio.create_task(second.call("complete_task", task_id, "failed"))
        await eventually(lambda: pool.fetchval(WAITING), what="the second waiting on the lock")
        await first.commit()
        with pytest.raises(InvalidTransition) as lost:
            await late
        await second.rollback()
    assert lost.value.current.status == "succeeded" and lost.value.task_id == task_id
    assert await counts(pool, task_id) == (0, 1, 1)


@kinds
async def test_the_commit_wakes_a_dispatcher(kind: str, pool, runtime, dsn, receiver) -> None:
    task_id = await new_task(pool, runtime, receiver.url)
    # A poll interval far longer than the test: only the NOTIFY can deliver in time.
    slow_poll = replace(runtime, settings=replace(runtime.settings, poll_interval_s=60))
    async with executors(kind, dsn) as make, running(dispatcher(slow_poll, pool)):
        await eventually(lambda: pool.fetchval(LISTENING), what="the dispatcher listening")
        ex = await make()
        await ex.begin()
        await ex.write("done")
        done = await ex.call("complete_task", task_id, "succeeded", result={"ok": True})
        await ex.commit()
        await receiver.wait_for(1, timeout=30)
    assert receiver.event_ids() == [done.event_id]
    assert json.loads(receiver.received[0].body)["data"]["result"] == {"ok": True}


@kinds
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
async def test_progress_in_the_callers_transaction(
    kind: str, commit: bool, pool, runtime, dsn
) -> None:
    task_id = await new_task(pool, runtime, start=True)
    async with executors(kind, dsn) as make:
        ex = await make()
        await ex.begin()
        await ex.write("half way")
        seen = await ex.call("report_progress", task_id, 50, "half")
        assert seen.progress["percent"] == 50 and seen.version == 3
        await (ex.commit() if commit else ex.rollback())
    row = await pool.fetchrow("SELECT progress, version FROM tasks WHERE id = $1", task_id)
    if commit:
        assert (row["progress"]["message"], row["version"]) == ("half", 3)
    else:
        assert (row["progress"], row["version"]) == (None, 2)
        assert await counts(pool, task_id) == (0, 0, 0)


@kinds
async def test_every_function_and_its_errors(kind: str, pool, runtime, dsn) -> None:
    task_id = await new_task(pool, runtime)
    async with executors(kind, dsn) as make:
        ex = await make()
        await ex.begin()
        assert (await ex.call("start_task", task_id)).status == "running"
        await ex.call("report_progress", task_id, 40)
        # Refusals raise no database error: the caller's transaction goes on.
        with pytest.raises(ProgressBackwards):
            await ex.call("report_progress", task_id, 10)
        with pytest.raises(ValueError):
            await ex.call("report_progress", task_id, 101)
        with pytest.raises(ValueError):
            await ex.call("complete_task", task_id, "running")
        with pytest.raises(TaskNotFound):
            await ex.call("cancel_task", "task_nope")
        done = await ex.call("timeout_task", task_id)
        assert done.status == "timed_out" and done.error["code"] == "timed_out"
        with pytest.raises(InvalidTransition) as info:
            await ex.call("cancel_task", task_id)
        assert info.value.current.status == "timed_out"
        await ex.commit()
    assert await counts(pool, task_id) == (0, 1, 1)


@pytest.mark.parametrize("kind", BORROWED)
async def test_a_lost_connection_is_database_unavailable(kind: str, pool, runtime, dsn) -> None:
    task_id = await new_task(pool, runtime)
    async with executors(kind, dsn) as make:
        ex = await make()
        await pool.execute("SELECT pg_terminate_backend($1)", await ex.pid())
        with pytest.raises(DatabaseUnavailable):
            await ex.call("complete_task", task_id, "succeeded")
    assert await pool.fetchval("SELECT status FROM tasks WHERE id = $1", task_id) == "queued"


async def test_other_connections_are_refused_by_name(dsn) -> None:
    with pytest.raises(TypeError, match="cannot run on a builtins.object"):
        await outbox.complete_task(object(), "task_x", "succeeded")
    conn = await asyncpg.connect(dsn)
    try:
        with pytest.raises(TypeError, match="hookrelay.outbox.sync: cannot run on a asyncpg"):
            hookrelay.outbox.sync.complete_task(conn, "task_x", "succeeded")
    finally:
        await conn.close()
    with (
        psycopg.Connection.connect(dsn) as sync_conn,
        pytest.raises(TypeError, match="outbox: cannot run"),
    ):
        async_driver(sync_conn)
    engine = create_engine("sqlite://")
    with engine.connect() as sqlite, pytest.raises(TypeError, match="postgresql\\+psycopg"):
        hookrelay.outbox.sync.complete_task(sqlite, "task_x", "succeeded")
    engine.dispose()
