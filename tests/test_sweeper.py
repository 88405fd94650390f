"""The timeout sweeper: overdue live tasks become timed_out with exactly one event."""

from __future__ import annotations

import asyncio
import contextlib

import asyncpg
import pytest

from hookrelay.outbox import complete_task
from hookrelay.outbox.errors import InvalidTransition
from hookrelay.outbox.store import changes
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tasks.timeouts import run as sweeper_run
from hookrelay.outbox.tasks.timeouts import sweep_once, sweeping
from hookrelay.outbox.tenants import create_tenant
from tests.support import eventually

pytestmark = pytest.mark.anyio
URL = "http://127.0.0.1:9/hook"


async def make(pool: asyncpg.Pool, runtime, timeouts: list[float | None]) -> list[str]:
    async with pool.acquire() as conn:
        t = await create_tenant(conn, "t", runtime.secret_box)
        return [
            (await create_task(conn, t.id, NewTask("x", URL, timeout_s=s)))[0].id for s in timeouts
        ]


async def test_overdue_tasks_time_out(pool, runtime) -> None:
    overdue, later, never = await make(pool, runtime, [0.01, 3600, None])
    assert await eventually(lambda: sweep_once(pool)) == 1
    rows = {r["id"]: r for r in await pool.fetch("SELECT id, status, error FROM tasks")}
    assert rows[overdue]["status"] == "timed_out" and rows[overdue]["error"]["code"] == "timed_out"
    assert rows[later]["status"] == rows[never]["status"] == "queued"
    events = await pool.fetch("SELECT task_id, event_type FROM outbox")
    assert [(e["task_id"], e["event_type"]) for e in events] == [(overdue, "task.timed_out")]
    assert await sweep_once(pool) == 0


async def test_running_tasks_time_out_too(pool, runtime) -> None:
    from hookrelay.outbox import start_task

    [tid] = await make(pool, runtime, [0.01])
    async with pool.acquire() as conn:
        await start_task(conn, tid)
    assert await eventually(lambda: sweep_once(pool)) == 1


async def test_completion_racing_the_sweeper_ends_in_one_state(pool, runtime) -> None:
    ids = await make(pool, runtime, [0.01] * 40)
    await asyncio.sleep(0.05)

    async def complete(tid: str) -> None:
        async with pool.acquire() as conn:
            with contextlib.suppress(InvalidTransition):
                await complete_task(conn, tid, "succeeded")

    await asyncio.gather(sweep_once(pool, batch=40), *(complete(t) for t in ids))
    rows = await pool.fetch("SELECT status, version FROM tasks")
    assert {r["status"] for r in rows} <= {"succeeded", "timed_out"}
    assert all(r["version"] == 2 for r in rows)
    per_task = await pool.fetch("SELECT task_id, count(*) AS n FROM outbox GROUP BY task_id")
    assert len(per_task) == 40 and all(r["n"] == 1 for r in per_task)


async def test_background_sweeper(pool, runtime) -> None:
    [tid] = await make(pool, runtime, [0.2])
    status = "SELECT status = 'timed_out' FROM tasks WHERE id=$1"
    async with sweeping(pool, 0.05):
        await eventually(lambda: pool.fetchval(status, tid))


async def sweep_until_numbered(pool: asyncpg.Pool, retention=None) -> None:
    """Run the sweeper until the stream-change queue is empty."""
    stop = asyncio.Event()
    run = asyncio.create_task(sweeper_run(pool, 0.05, stop, retention))
    try:
        await eventually(
            lambda: pool.fetchval("SELECT count(*) = 0 FROM task_change_queue"), what="numbered"
        )
    finally:
        stop.set()
        await run


async def test_a_sweep_numbers_changes_nobody_announced(pool, runtime) -> None:
    """A writer that runs in no API process and sends no hint: the sweeper's floor."""
    (task_id,) = await make(pool, runtime, [None])
    assert await pool.fetchval("SELECT count(*) FROM task_change_queue") == 1
    await sweep_until_numbered(pool)
    async with pool.acquire() as conn:
        logged = await changes.task_changes_after(conn, task_id=task_id, version=0, limit=5)
    assert [c.task.version for c in logged] == [1]


async def test_a_failing_purge_does_not_stop_the_numbering(pool, runtime, monkeypatch) -> None:
    from hookrelay.outbox.tasks import timeouts as sweeper

    async def broken(*args, **kwargs):
        raise RuntimeError("purge is broken")

    monkeypatch.setattr(sweeper, "purge", broken)
    await make(pool, runtime, [None])
    await sweep_until_numbered(pool, sweeper.Retention(every_s=0))
