"""Group commit: concurrent writes share one statement, and each row keeps its own semantics.

Each test makes its burst with ``asyncio.gather``, so the requests queue in one turn of
the loop, and reads the batcher's counters to show how many statements carried them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from hookrelay.outbox import tracing
from hookrelay.outbox.errors import (
    IdempotencyInFlight,
    IdempotencyKeyReused,
    InvalidTransition,
    ProgressBackwards,
    TaskNotFound,
)
from hookrelay.outbox.tasks import GroupCommit, Idempotency, NewTask
from hookrelay.outbox.tasks.group_commit import Alone, Batcher
from hookrelay.outbox.tasks.state_changes import event_body
from hookrelay.outbox.tenants import create_tenant
from hookrelay.service.server.prerequisites import Runtime

pytestmark = pytest.mark.anyio
HOOK = "https://hooks.example/in"


@pytest.fixture
async def writes(pool: asyncpg.Pool, runtime: Runtime) -> GroupCommit:
    return GroupCommit(pool, box=runtime.secret_box)


@pytest.fixture
async def tenant_id(pool: asyncpg.Pool, runtime: Runtime) -> str:
    async with pool.acquire() as conn:
        return (await create_tenant(conn, "acme", runtime.secret_box)).id


def spec(n: int = 0, **kw: Any) -> NewTask:
    return NewTask(type="t", callback_url=HOOK, input={"n": n}, **kw)


async def burst(*calls: Any) -> list[Any]:
    return await asyncio.gather(*calls, return_exceptions=True)


async def test_a_lone_submit_goes_out_alone_and_at_once(writes, tenant_id) -> None:
    task, created = await writes.submit(tenant_id, spec())
    assert created and task.status == "queued"
    assert (writes.submits.statements, writes.submits.rows) == (1, 1)


async def test_concurrent_submits_share_one_statement(writes, tenant_id, pool) -> None:
    got = await burst(*(writes.submit(tenant_id, spec(i)) for i in range(50)))
    assert all(created for _, created in got)
    assert [t.input for t, _ in got] == [{"n": i} for i in range(50)]
    assert writes.submits.rows == 50 and writes.submits.statements < 5
    assert await pool.fetchval("SELECT count(*) FROM tasks") == 50


async def test_a_batch_is_bounded(pool, runtime, tenant_id) -> None:
    writes = GroupCommit(pool, box=runtime.secret_box, max_running=1)
    writes.submits._max_batch = 8
    await burst(*(writes.submit(tenant_id, spec(i)) for i in range(40)))
    assert writes.submits.rows == 40 and writes.submits.statements >= 5


async def test_one_key_twice_in_a_burst_is_one_task(writes, tenant_id, pool) -> None:
    key = Idempotency("k", b"same body")
    a, b = await burst(writes.submit(tenant_id, spec(), key), writes.submit(tenant_id, spec(), key))
    assert a[0].id == b[0].id and sorted([a[1], b[1]]) == [False, True]
    assert await pool.fetchval("SELECT count(*) FROM tasks") == 1


async def test_one_key_with_two_bodies_in_a_burst(writes, tenant_id, pool) -> None:
    first, second = await burst(
        writes.submit(tenant_id, spec(), Idempotency("k", b"one")),
        writes.submit(tenant_id, spec(), Idempotency("k", b"two")),
    )
    assert first[1] is True and isinstance(second, IdempotencyKeyReused)
    assert await pool.fetchval("SELECT count(*) FROM tasks") == 1


async def test_keys_are_per_tenant_within_a_burst(writes, tenant_id, pool, runtime) -> None:
    async with pool.acquire() as conn:
        other = (await create_tenant(conn, "globex", runtime.secret_box)).id
    key = Idempotency("k", b"h")
    a, b = await burst(writes.submit(tenant_id, spec(), key), writes.submit(other, spec(), key))
    assert a[1] and b[1] and a[0].id != b[0].id
    assert writes.submits.statements == 1


async def test_a_key_held_by_an_open_transaction_is_in_flight_alone(
    writes, tenant_id, pool
) -> None:
    async with pool.acquire() as holder, holder.transaction():
        await holder.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || $2, 42))", tenant_id, "k"
        )
        busy, free = await burst(
            writes.submit(tenant_id, spec(), Idempotency("k", b"h")),
            writes.submit(tenant_id, spec()),
        )
    assert isinstance(busy, IdempotencyInFlight)
    assert free[1] is True
    assert await pool.fetchval("SELECT count(*) FROM tasks") == 1


async def test_a_row_the_database_refuses_fails_only_its_own_request(writes, tenant_id) -> None:
    # A tenant gone since its key was checked: the foreign key refuses the whole
    # statement, and the retry row by row fails only that submit.
    got = await burst(
        writes.submit(tenant_id, spec(1)),
        writes.submit("ten_gone", spec(2)),
        writes.submit(tenant_id, spec(3)),
    )
    assert got[0][1] and got[2][1]
    assert isinstance(got[1], asyncpg.ForeignKeyViolationError)


async def test_callback_headers_and_traces_in_a_burst(writes, tenant_id, pool) -> None:
    trace = tracing.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    got = await burst(
        writes.submit(tenant_id, spec(callback_headers={"x-api-key": "s3cret", "x-b": "2"})),
        writes.submit(tenant_id, spec(trace=trace)),
        writes.submit(tenant_id, spec()),
    )
    (headed, _), (traced, _), (plain, _) = got
    assert headed.callback_header_names == ["x-api-key", "x-b"]
    assert plain.callback_header_names is None
    assert await pool.fetchval("SELECT count(*) FROM callback_headers") == 1
    row = await pool.fetchrow("SELECT task_id, traceparent FROM task_traces")
    assert row["task_id"] == traced.id and row["traceparent"].startswith("00-4bf92f35")


async def queued(writes: GroupCommit, tenant_id: str, n: int) -> list[str]:
    got = await burst(*(writes.submit(tenant_id, spec(i)) for i in range(n)))
    return [t.id for t, _ in got]


async def test_concurrent_completes_share_one_statement_with_their_events(
    writes, tenant_id, pool
) -> None:
    ids = await queued(writes, tenant_id, 30)
    done = await burst(*(writes.complete(i, "succeeded", {"ok": i}) for i in ids))
    assert [t.status for t in done] == ["succeeded"] * 30
    assert writes.changes.rows == 30 and writes.changes.statements < 5
    # Each event and its outbox row committed with the state, the body fixed then.
    rows = await pool.fetch(
        "SELECT e.task_id, e.event_id, e.body FROM events e JOIN outbox o USING (event_id)"
    )
    assert len(rows) == 30
    by_task = {t.id: t for t in done}
    for row in rows:
        task = by_task[row["task_id"]]
        assert row["event_id"] == task.event_id and row["body"] == event_body(task)


async def test_an_already_terminal_task_is_refused_alone(writes, tenant_id, pool) -> None:
    ids = await queued(writes, tenant_id, 4)
    await writes.complete(ids[1], "failed")
    got = await burst(*(writes.complete(i, "succeeded") for i in ids))
    assert isinstance(got[1], InvalidTransition) and got[1].current.status == "failed"
    assert [got[i].status for i in (0, 2, 3)] == ["succeeded"] * 3
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 4


async def test_two_completes_of_one_task_in_a_burst(writes, tenant_id, pool) -> None:
    [task_id] = await queued(writes, tenant_id, 1)
    first, second = await burst(
        writes.complete(task_id, "succeeded"), writes.complete(task_id, "failed")
    )
    # In arrival order: the first wins, the second meets a terminal task.
    assert first.status == "succeeded"
    assert isinstance(second, InvalidTransition) and second.current.status == "succeeded"
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 1


async def test_start_then_complete_of_one_task_in_a_burst_apply_in_order(writes, tenant_id) -> None:
    [task_id] = await queued(writes, tenant_id, 1)
    started, done = await burst(writes.start(task_id), writes.complete(task_id, "succeeded"))
    assert started.status == "running" and started.version == 2
    assert done.status == "succeeded" and done.version == 3


async def test_unknown_and_other_tenants_tasks_in_a_burst(writes, tenant_id, pool, runtime) -> None:
    async with pool.acquire() as conn:
        other = (await create_tenant(conn, "globex", runtime.secret_box)).id
    mine = await queued(writes, tenant_id, 2)
    got = await burst(
        writes.cancel(mine[0], tenant_id=tenant_id),
        writes.cancel(mine[1], tenant_id=other),
        writes.cancel("task_nope", tenant_id=tenant_id),
    )
    assert got[0].status == "cancelled"
    assert isinstance(got[1], TaskNotFound) and isinstance(got[2], TaskNotFound)


async def test_a_task_of_an_older_release_is_completed_alone(writes, tenant_id, pool) -> None:
    ids = await queued(writes, tenant_id, 3)
    # As a release before 0018 left it: no destination key for its origin.
    await pool.execute("DELETE FROM destination_keys")
    got = await burst(*(writes.complete(i, "succeeded") for i in ids))
    assert [t.status for t in got] == ["succeeded"] * 3
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 3


async def test_progress_reports_in_a_burst(writes, tenant_id, pool) -> None:
    ids = await queued(writes, tenant_id, 3)
    for i in ids:
        await writes.start(i)
    await writes.progress(ids[0], 80)
    got = await burst(
        writes.progress(ids[0], 10, "back"),
        writes.progress(ids[1], 50, "half"),
        writes.progress(ids[2], 100),
    )
    assert isinstance(got[0], ProgressBackwards)
    assert got[1].progress["percent"] == 50 and got[1].progress["message"] == "half"
    assert got[2].progress["percent"] == 100


async def test_a_report_the_batch_cannot_encode_fails_alone(writes, tenant_id, pool) -> None:
    # A lone surrogate cannot be encoded as UTF-8: the batch's one parameter fails to
    # build, before any statement. The API refuses such text first; a direct caller
    # still loses only that report.
    ids = await queued(writes, tenant_id, 3)
    for i in ids:
        await writes.start(i)
    got = await burst(
        writes.progress(ids[0], 10, "ok"),
        writes.progress(ids[1], 20, "bad \ud800"),
        writes.progress(ids[2], 30),
    )
    assert got[0].progress["percent"] == 10 and got[2].progress["percent"] == 30
    assert isinstance(got[1], Exception)
    assert writes.reports.alone == 3


async def test_a_cancelled_request_leaves_the_rest_of_its_batch() -> None:
    gate = asyncio.Event()
    seen: list[list[int]] = []

    async def run(items: list[int]) -> list[int | Exception | Alone[int]]:
        seen.append(items)
        await gate.wait()
        return [i * 2 for i in items]

    batcher: Batcher[int, int] = Batcher(run, max_running=1)
    first = asyncio.ensure_future(batcher(0))
    await asyncio.sleep(0)
    waiting = [asyncio.ensure_future(batcher(i)) for i in range(1, 4)]
    await asyncio.sleep(0.01)
    waiting[0].cancel()  # its client went away while it queued
    gate.set()
    assert await first == 0
    assert [await w for w in waiting[1:]] == [4, 6]
    assert seen == [[0], [2, 3]]


async def test_at_most_max_running_statements_at_once() -> None:
    running = high = 0

    async def run(items: list[int]) -> list[int | Exception | Alone[int]]:
        nonlocal running, high
        running += 1
        high = max(high, running)
        await asyncio.sleep(0.01)
        running -= 1
        return list(items)

    batcher: Batcher[int, int] = Batcher(run, max_running=2)
    calls = []
    for i in range(20):  # one a turn of the loop: the first two go out alone
        calls.append(asyncio.ensure_future(batcher(i)))
        await asyncio.sleep(0)
    assert await asyncio.gather(*calls) == list(range(20))
    assert high == 2 and batcher.statements <= 4


async def test_a_task_locked_elsewhere_waits_alone_and_holds_nobody_up(
    writes, tenant_id, pool
) -> None:
    ids = await queued(writes, tenant_id, 3)
    async with pool.acquire() as holder:
        tx = holder.transaction()
        await tx.start()
        # An executor's transaction holding the task, as lock_task does.
        await holder.execute("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE", ids[0])
        waiting = asyncio.ensure_future(writes.complete(ids[0], "succeeded"))
        others = await asyncio.wait_for(
            burst(*(writes.complete(i, "succeeded") for i in ids[1:])), 10
        )
        assert [t.status for t in others] == ["succeeded"] * 2
        # Later writes go on too, while the locked one still waits for its lock.
        [later] = await queued(writes, tenant_id, 1)
        assert (await asyncio.wait_for(writes.start(later), 10)).status == "running"
        assert not waiting.done()
        await tx.commit()
    assert (await asyncio.wait_for(waiting, 10)).status == "succeeded"


# Enough tasks that a plan joining a batch to the table by hashing every task costs
# more than the batch (measured: 1.4 ms of a 1.7 ms complete at 4,000), and that a
# fresh plan for each lone complete looked cheaper to the planner than its kept one.
# Not analysed: as a new deployment's or a bulk-loaded table is until autovacuum
# gets to it, when the planner guesses its size from its pages.
MANY_TASKS = 4000
FRESH_PLANS = 5  # PostgreSQL plans a prepared statement afresh this many times first


async def _seed_queued(pool: asyncpg.Pool, tenant_id: str, n: int) -> list[str]:
    from hookrelay.outbox import ids

    task_ids = [ids.task_id() for _ in range(n)]
    async with pool.acquire() as conn:
        await conn.copy_records_to_table(
            "tasks",
            records=[(t, tenant_id, "t", HOOK) for t in task_ids],
            columns=["id", "tenant_id", "type", "callback_url"],
        )
        await conn.execute(
            "INSERT INTO destination_keys (origin, host) VALUES (url_origin($1), $2)"
            " ON CONFLICT (origin) DO NOTHING",
            HOOK,
            "https://hooks.example:443",
        )
    return task_ids


def _transition(task_id: str) -> Any:
    from hookrelay.outbox import ids
    from hookrelay.outbox.models import LIVE_STATUSES, EventId
    from hookrelay.outbox.store import tasks as store

    return store.Transition(
        task_id=task_id,
        status="succeeded",
        allowed_from=LIVE_STATUSES,
        result={"ok": True},
        error=None,
        event_id=EventId(ids.event_id()),
        tenant_id=None,
    )


async def test_lone_completes_reuse_one_plan_that_reads_their_tasks_by_key(pool, tenant_id) -> None:
    """A complete that arrives alone is a batch of one. Its statement is planned
    once and kept (not planned afresh for each, which cost four times the statement),
    and the kept plan reaches its task through the key, not by reading the table."""
    from hookrelay.outbox.store import tasks as store

    task_ids = await _seed_queued(pool, tenant_id, MANY_TASKS)
    async with pool.acquire() as conn:
        for task_id in task_ids[:12]:
            [task] = await store.finish_tasks(conn, [_transition(task_id)])
            assert task is not None and task.status == "succeeded"
        batch = store.finish_tasks_rows([_transition(task_ids[12])])
        await _assert_one_plan_kept_reading_by_key(conn, "finish_tasks", runs=12, batch=batch)


async def test_lone_progress_reports_reuse_one_plan_that_reads_their_tasks_by_key(
    pool, tenant_id
) -> None:
    """As for completes: a report that arrives alone is planned once, and the kept
    plan reaches its task by key, not through the index of every running task."""
    from hookrelay.outbox.store import tasks as store

    task_ids = await _seed_queued(pool, tenant_id, MANY_TASKS)
    # All of them running, which the planner does not know yet: it was told of none.
    await pool.execute("UPDATE tasks SET status = 'running'")
    async with pool.acquire() as conn:
        for task_id in task_ids[:12]:
            [task] = await store.report_progresses(conn, [store.Report(task_id, 50.0, None)])
            assert task is not None and task.progress is not None
        batch = store.report_progresses_rows([store.Report(task_ids[12], 50.0, None)])
        await _assert_one_plan_kept_reading_by_key(conn, "report_progresses", runs=12, batch=batch)


async def _assert_one_plan_kept_reading_by_key(
    conn: asyncpg.Connection, name: str, *, runs: int, batch: str
) -> None:
    """The named statement, run ``runs`` times on ``conn``, was planned afresh only the
    first few times; and the plan kept, run on ``batch`` (a batch of one), reads a few
    rows, not the table."""
    from hookrelay.outbox.sql import sql

    statement = sql(name)
    generic, custom = await conn.fetchrow(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
        statement,
    )
    assert (generic, custom) == (runs - FRESH_PLANS, FRESH_PLANS)
    async with conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        await conn.execute(f"PREPARE kept (text) AS {statement}")
        try:
            plan = await conn.fetchval(
                f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE kept({_literal(batch)})"
            )
        finally:
            await conn.execute("DEALLOCATE kept")
    assert _rows_read(plan) < 50


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _rows_read(plan: Any) -> int:
    """Heap and index tuples the plan touched, from EXPLAIN ANALYZE's row counts."""
    import json

    total = 0

    def walk(node: dict[str, Any]) -> None:
        nonlocal total
        if "Scan" in str(node.get("Node Type", "")) and node.get("Node Type") != "CTE Scan":
            total += int(node.get("Actual Rows", 0)) * int(node.get("Actual Loops", 1))
            total += int(node.get("Rows Removed by Filter", 0))
        for child in node.get("Plans", []):
            walk(child)

    walk((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
    return total
