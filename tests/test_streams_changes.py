"""The change log: queued at commit by a trigger, numbered per tenant in commit order."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from hookrelay.outbox import complete_task, report_progress, start_task
from hookrelay.outbox.store import CHANGES_CHANNEL, OUTBOX_CHANNEL, TASKS_CHANNEL, changes, signals
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from tests.support import dispatcher, eventually, wait_drained

pytestmark = pytest.mark.anyio


async def log_of(pool: asyncpg.Pool, tenant_id: str) -> list[tuple[int, str, int, str]]:
    """The tenant's log, once everything committed so far is numbered."""
    async with pool.acquire() as conn:
        await changes.number_pending(conn)
    rows = await pool.fetch(
        "SELECT seq, task_id, version, state ->> 'status' AS status FROM task_changes"
        " WHERE tenant_id = $1 ORDER BY seq",
        tenant_id,
    )
    return [(r["seq"], r["task_id"], r["version"], r["status"]) for r in rows]


@pytest.fixture
async def tenant_id(pool: asyncpg.Pool, runtime) -> str:
    async with pool.acquire() as conn:
        return (await create_tenant(conn, "acme", runtime.secret_box)).id


async def new_task(conn: asyncpg.Connection, tenant_id: str, url: str = "http://127.0.0.1:9/h"):
    task, _ = await create_task(conn, tenant_id, NewTask(type="t", callback_url=url))
    return task


async def test_two_changes_in_one_transaction_are_two_entries_in_order(pool, tenant_id) -> None:
    async with pool.acquire() as conn:
        async with conn.transaction():
            task = await new_task(conn, tenant_id)
            await start_task(conn, task.id)
            await report_progress(conn, task.id, 10, "first")
            # Nothing is logged before the commit.
            assert await conn.fetchval("SELECT count(*) FROM task_changes") == 0
        await changes.number_pending(conn)
        logged = await changes.changes_after(conn, tenant_id=tenant_id, after=0, limit=10)
    assert await log_of(pool, tenant_id) == [
        (1, task.id, 1, "queued"),
        (2, task.id, 2, "running"),
        (3, task.id, 3, "running"),
    ]
    # Each entry renders the task as that version left it.
    assert [c.task.status for c in logged] == ["queued", "running", "running"]
    assert logged[0].task.progress is None and logged[2].task.progress["message"] == "first"
    assert logged[1].task.updated_at <= logged[2].task.updated_at


async def test_rolled_back_changes_are_not_logged_or_notified(pool, tenant_id) -> None:
    heard: list[str] = []

    def hear(*args: object) -> None:
        heard.append(str(args[3]))

    listener = await pool.acquire()
    await listener.add_listener(CHANGES_CHANNEL, hear)
    try:
        async with pool.acquire() as conn:
            task = await new_task(conn, tenant_id)
            await start_task(conn, task.id)
            tx = conn.transaction()
            await tx.start()
            await report_progress(conn, task.id, 50)
            await tx.rollback()
            await report_progress(conn, task.id, 60)
        assert [e[2:] for e in await log_of(pool, tenant_id)] == [
            (1, "queued"),
            (2, "running"),
            (3, "running"),
        ]
        # Numbered in one batch (log_of numbers first): one notification, ending at 3.
        await eventually(lambda: heard)
        assert heard == [f"{tenant_id} 3 {task.id}"]
    finally:
        await listener.remove_listener(CHANGES_CHANNEL, hear)
        await pool.release(listener)


async def test_concurrent_transactions_are_numbered_in_commit_order(pool, tenant_id) -> None:
    async with pool.acquire() as conn:
        a, b = await new_task(conn, tenant_id), await new_task(conn, tenant_id)
    first, second = await pool.acquire(), await pool.acquire()
    try:
        tx1, tx2 = first.transaction(), second.transaction()
        await tx1.start()
        await tx2.start()
        await start_task(first, a.id)  # written first ...
        await start_task(second, b.id)
        await tx2.commit()  # ... committed second
        await tx1.commit()
    finally:
        await pool.release(first)
        await pool.release(second)
    assert [e[1:3] for e in await log_of(pool, tenant_id)][2:] == [(b.id, 2), (a.id, 2)]


async def test_each_tenant_has_its_own_numbers(pool, runtime, tenant_id) -> None:
    async with pool.acquire() as conn:
        other = await create_tenant(conn, "globex", runtime.secret_box)
        await new_task(conn, tenant_id)
        await new_task(conn, other.id)
        await new_task(conn, tenant_id)
        await changes.number_pending(conn)
        position = await changes.stream_position(conn, tenant_id=tenant_id)
    assert [e[0] for e in await log_of(pool, tenant_id)] == [1, 2]
    assert [e[0] for e in await log_of(pool, other.id)] == [1]
    assert (position.last_seq, position.oldest_seq) == (2, 1)


async def test_delivery_summary_updates_are_not_changes(pool, runtime, tenant_id, receiver) -> None:
    async with pool.acquire() as conn:
        task = await new_task(conn, tenant_id, receiver.url)
        await complete_task(conn, task.id, "succeeded")
    d = dispatcher(runtime, pool)
    run = asyncio.create_task(d.run())
    try:
        await wait_drained(pool)
    finally:
        d.stop()
        await run
    status = await pool.fetchval("SELECT delivery_status FROM tasks WHERE id = $1", task.id)
    assert status == "delivered"
    assert [e[2:] for e in await log_of(pool, tenant_id)] == [(1, "queued"), (2, "succeeded")]
    async with pool.acquire() as conn:
        logged = await changes.task_changes_after(conn, task_id=task.id, version=1, limit=5)
        assert await changes.task_oldest_version(conn, task_id=task.id) == 1
    # Rendered with the delivery summary as it is now.
    assert [c.task.delivery_status for c in logged] == ["delivered"]


async def test_a_write_queues_its_change_and_nothing_else(pool, dsn, tenant_id) -> None:
    """No counter row and no NOTIFY in the writer's transaction: nothing another
    writer could wait for. The numbers come from the numberer alone."""
    heard: list[str] = []
    listener = await asyncpg.connect(dsn)
    for channel in (CHANGES_CHANNEL, TASKS_CHANNEL, OUTBOX_CHANNEL):
        await listener.add_listener(channel, lambda *args: heard.append(str(args[2])))
    try:
        async with pool.acquire() as conn:
            task = await new_task(conn, tenant_id)
            await start_task(conn, task.id, notify=False)
            await complete_task(conn, task.id, "succeeded", notify=False)
        assert await pool.fetchval("SELECT count(*) FROM tenant_streams") == 0
        queued = await pool.fetch("SELECT version FROM task_change_queue ORDER BY id")
        assert [r["version"] for r in queued] == [1, 2, 3]
        await listener.execute("SELECT 1")  # a round trip: notifications sent would be here
        assert heard == []
        assert [e[2] for e in await log_of(pool, tenant_id)] == [1, 2, 3]
        assert await pool.fetchval("SELECT count(*) FROM task_change_queue") == 0
        await eventually(lambda: heard == [CHANGES_CHANNEL])  # the numberer's one NOTIFY
    finally:
        await listener.close()


async def test_numberers_racing_writers_leave_no_gap_and_no_duplicate(pool, runtime) -> None:
    """Writers on two tenants commit while three numberers run at once: every change is
    numbered once, each tenant's numbers run 1..n, and each task's versions are in order."""
    async with pool.acquire() as conn:
        tenants = [(await create_tenant(conn, f"t{i}", runtime.secret_box)).id for i in range(2)]
    writing = True

    async def writer(tenant: str) -> None:
        async with pool.acquire() as conn:
            for _ in range(15):
                task = await new_task(conn, tenant)
                await start_task(conn, task.id, notify=False)
                for p in (10, 50):
                    await report_progress(conn, task.id, p, notify=False)

    async def numberer() -> None:
        async with pool.acquire() as conn:
            while writing:
                await changes.number_pending(conn)

    numberers = [asyncio.create_task(numberer()) for _ in range(3)]
    await asyncio.gather(*(writer(t) for t in tenants for _ in range(2)))
    writing = False
    await asyncio.gather(*numberers)
    for tenant in tenants:
        log = await log_of(pool, tenant)
        assert [e[0] for e in log] == list(range(1, 2 * 15 * 4 + 1))
        assert len({(e[1], e[2]) for e in log}) == len(log)
        versions: dict[str, list[int]] = {}
        for _, task_id, version, _ in log:
            versions.setdefault(task_id, []).append(version)
        assert all(v == [1, 2, 3, 4] for v in versions.values()) and len(versions) == 30


async def test_a_tenant_deleted_with_changes_queued_does_not_stop_numbering(
    pool, runtime, tenant_id
) -> None:
    async with pool.acquire() as conn:
        gone = await create_tenant(conn, "gone", runtime.secret_box)
        await new_task(conn, gone.id)
        await new_task(conn, tenant_id)
        await conn.execute("DELETE FROM tenants WHERE id = $1", gone.id)
        numbered = await changes.number_pending(conn)
    assert [(n.tenant_id, n.last_seq, n.count) for n in numbered] == [(tenant_id, 1, 1)]
    assert await pool.fetchval("SELECT count(*) FROM task_change_queue") == 0


def test_the_notification_payload_parses() -> None:
    assert signals.parse_changes("ten_a 7 task_1 task_2\nten_b 3") == [
        signals.Changed("ten_a", 7, ("task_1", "task_2")),
        signals.Changed("ten_b", 3, ()),
    ]
    assert signals.parse_changes("not ours") is None


async def test_a_long_batch_is_split_over_notifications_within_the_limit(
    pool, dsn, tenant_id
) -> None:
    heard: list[str] = []
    listener = await asyncpg.connect(dsn)
    await listener.add_listener(CHANGES_CHANNEL, lambda *args: heard.append(str(args[3])))
    try:
        async with pool.acquire() as conn:
            made = [(await new_task(conn, tenant_id)).id for _ in range(400)]
            await changes.number_pending(conn)
        await eventually(lambda: sum(len(p) for p in heard) > 400 * 30)
        assert len(heard) > 1 and all(len(p) <= 8000 for p in heard)
        named = [t for p in heard for c in signals.parse_changes(p) or [] for t in c.task_ids]
        assert sorted(named) == sorted(made)
        assert {c.last_seq for p in heard for c in signals.parse_changes(p) or []} == {400}
    finally:
        await listener.close()


async def test_many_tenants_in_one_batch_each_get_their_own_numbers(pool, runtime) -> None:
    async with pool.acquire() as conn:
        tenants = [(await create_tenant(conn, f"t{i}", runtime.secret_box)).id for i in range(30)]
        for tenant in tenants:
            task = await new_task(conn, tenant)
            await start_task(conn, task.id, notify=False)
        numbered = await changes.number_pending(conn)
    assert sorted((n.tenant_id, n.last_seq, n.count) for n in numbered) == sorted(
        (t, 2, 2) for t in tenants
    )
    for tenant in tenants:
        assert [e[0] for e in await log_of(pool, tenant)] == [1, 2]


async def test_a_change_is_timed_when_numbered_so_time_rises_with_the_number(
    pool, tenant_id
) -> None:
    """Retention purges by changed_at; were it the commit's time, a change numbered
    after another could carry an earlier time and be purged before it."""
    async with pool.acquire() as conn:
        first = await new_task(conn, tenant_id)
        before_numbering = await conn.fetchval("SELECT clock_timestamp()")
        await changes.number_pending(conn)
        second = await new_task(conn, tenant_id)
        await changes.number_pending(conn)
    rows = await pool.fetch(
        "SELECT task_id, changed_at FROM task_changes WHERE tenant_id = $1 ORDER BY seq", tenant_id
    )
    assert [r["task_id"] for r in rows] == [first.id, second.id]
    assert rows[0]["changed_at"] >= before_numbering
    assert rows[0]["changed_at"] <= rows[1]["changed_at"]
