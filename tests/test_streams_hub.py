"""The stream hub: live fan-out, resume from the log, the cap, slow consumers, shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from hookrelay.outbox import complete_task, report_progress, start_task
from hookrelay.outbox.store import Listener
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from hookrelay.service.live import Change, Reset, StreamHub, TooManyStreams
from hookrelay.service.live import hub as hub_module
from tests.support import eventually, purge_changes

pytestmark = pytest.mark.anyio
HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture
async def hub(dsn: str, pool: asyncpg.Pool) -> AsyncIterator[StreamHub]:
    listener = Listener(dsn, {}, name="test-hub")
    h = StreamHub(listener, per_tenant=3, queue_size=4)
    await h.start(pool)
    await listener.start()
    yield h
    await listener.stop()
    await h.stop()


@pytest.fixture
async def tenant_id(pool: asyncpg.Pool, runtime) -> str:
    async with pool.acquire() as conn:
        return (await create_tenant(conn, "acme", runtime.secret_box)).id


async def new_task(pool: asyncpg.Pool, tenant_id: str) -> str:
    async with pool.acquire() as conn:
        task, _ = await create_task(conn, tenant_id, NewTask(type="t", callback_url=HOOK))
    return task.id


async def next_change(sub) -> Change:
    item = await asyncio.wait_for(sub.get(), 10)
    assert isinstance(item, Change), item
    return item


async def test_live_changes_in_order_rendered_once_for_all(hub, pool, tenant_id) -> None:
    a, b = await hub.open(tenant_id), await hub.open(tenant_id)
    a.watch_all()
    task_id = await new_task(pool, tenant_id)
    b.watch([task_id])
    async with pool.acquire() as conn:
        await start_task(conn, task_id)
        await report_progress(conn, task_id, 50, "half")
        await complete_task(conn, task_id, "succeeded", result={"ok": True})
    got_a = [await next_change(a) for _ in range(4)]
    assert [c.version for c in got_a] == [1, 2, 3, 4]
    assert [c.status for c in got_a] == ["queued", "running", "running", "succeeded"]
    assert got_a[2].progress["percent"] == 50 and got_a[3].terminal
    seqs = [c.seq for c in got_a]
    assert seqs == list(range(seqs[0], seqs[0] + 4))
    # b watches the task from after its first change committed: whether it gets
    # that one depends on whether the hub had read it yet; it gets all the rest.
    got_b = [await next_change(b)]
    while got_b[-1].version < 4:
        got_b.append(await next_change(b))
    assert [c.version for c in got_b][-3:] == [2, 3, 4]
    assert got_b[-1] is got_a[-1]  # the same rendered object for every subscriber
    async with pool.acquire() as conn:
        now = await conn.fetchrow("SELECT * FROM tasks WHERE id = $1", task_id)
    assert got_a[-1].task["result"] == {"ok": True} and got_a[-1].task["version"] == now["version"]


async def test_resume_replays_from_the_log_then_goes_live(hub, pool, tenant_id) -> None:
    task_id = await new_task(pool, tenant_id)
    async with pool.acquire() as conn:
        await start_task(conn, task_id)
        for p in (10, 20, 30):
            await report_progress(conn, task_id, p)
    sub = await hub.open(tenant_id, after=2)
    sub.watch_all()
    replayed = [await next_change(sub) for _ in range(3)]
    assert [c.seq for c in replayed] == [3, 4, 5]
    async with pool.acquire() as conn:
        await report_progress(conn, task_id, 40)
    live = await next_change(sub)
    assert live.seq == 6 and sub.live
    # Resuming again (as a WebSocket client may) replays without duplicates.
    sub.resume(4)
    assert [(await next_change(sub)).seq for _ in range(2)] == [5, 6]


async def test_cap_per_tenant(hub, tenant_id) -> None:
    subs = [await hub.open(tenant_id) for _ in range(3)]
    with pytest.raises(TooManyStreams) as refused:
        await hub.open(tenant_id)
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "10"}
    subs[0].close()
    assert hub.open_count(tenant_id) == 2
    await hub.open(tenant_id)


async def test_slow_consumer_is_dropped_not_buffered(hub, pool, tenant_id) -> None:
    slow = await hub.open(tenant_id)
    slow.watch_all()
    task_id = await new_task(pool, tenant_id)
    async with pool.acquire() as conn:
        await start_task(conn, task_id)
        for p in range(1, 6):
            await report_progress(conn, task_id, p)
    # The changes may reach the hub in several batches (each numbering takes what has
    # committed by then): read once it has handed them all out.
    await eventually(lambda: slow.reason is not None)
    assert await asyncio.wait_for(slow.get(), 10) is None
    assert slow.reason == "slow_consumer"
    assert hub.open_count(tenant_id) == 0


async def test_retention_gap_gives_a_reset(hub, pool, tenant_id) -> None:
    task_id = await new_task(pool, tenant_id)
    async with pool.acquire() as conn:
        await start_task(conn, task_id)
        await report_progress(conn, task_id, 5)
    await purge_changes(pool, "seq <= 2")
    sub = await hub.open(tenant_id, after=1)
    sub.watch_all()
    reset = await asyncio.wait_for(sub.get(), 10)
    assert isinstance(reset, Reset) and reset.code == "history_expired"
    assert (reset.after, reset.resume_after) == (1, 2)
    assert (await next_change(sub)).seq == 3
    ahead = await hub.open(tenant_id, after=99)
    reset = await asyncio.wait_for(ahead.get(), 10)
    assert isinstance(reset, Reset) and reset.code == "unknown_position"
    assert reset.resume_after == 3 and reset.to_resource()["resumeAfter"] == 3


async def test_rollback_pushes_nothing(hub, pool, tenant_id) -> None:
    task_id = await new_task(pool, tenant_id)
    async with pool.acquire() as conn:
        await start_task(conn, task_id)
    sub = await hub.open(tenant_id)
    sub.watch_all()
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await report_progress(conn, task_id, 70)
        await tx.rollback()
        await report_progress(conn, task_id, 80)
    change = await next_change(sub)
    assert change.progress["percent"] == 80 and change.version == 3


async def test_lost_listen_reads_again_from_the_log(hub, pool, tenant_id, monkeypatch) -> None:
    sub = await hub.open(tenant_id)
    sub.watch_all()
    deaf = dict.fromkeys(hub._listener._callbacks, [lambda payload: None])
    monkeypatch.setattr(hub._listener, "_callbacks", deaf)
    task_id = await new_task(pool, tenant_id)
    hub._read_all()  # what the listener calls after reconnecting
    assert (await next_change(sub)).task_id == task_id


async def test_shutdown_ends_every_subscription(hub, tenant_id) -> None:
    sub = await hub.open(tenant_id)
    waiting = asyncio.create_task(sub.get())
    await asyncio.sleep(0)
    hub.end_all()
    assert await asyncio.wait_for(waiting, 10) is None and sub.reason == "shutdown"
    with pytest.raises(Exception, match="shutting down"):
        await hub.open(tenant_id)


async def test_catch_up_pages(hub, pool, tenant_id, monkeypatch) -> None:
    monkeypatch.setattr(hub_module, "PAGE", 2)
    task_id = await new_task(pool, tenant_id)
    async with pool.acquire() as conn:
        await start_task(conn, task_id)
        for p in (1, 2, 3):
            await report_progress(conn, task_id, p)
    sub = await hub.open(tenant_id, after=0)
    sub.watch_all()
    got = []
    async for item in sub:
        assert isinstance(item, Change)
        got.append(item.seq)
        if len(got) == 5:
            sub.close()
    assert got == [1, 2, 3, 4, 5] and sub.reason == "closed"


async def test_unwatch_and_watch_set(hub, pool, tenant_id) -> None:
    a, b = await new_task(pool, tenant_id), await new_task(pool, tenant_id)
    sub = await hub.open(tenant_id)
    sub.watch([a, b])
    sub.unwatch([a])
    assert sub.watches(b) and not sub.watches(a)
    async with pool.acquire() as conn:
        await start_task(conn, a)
        await start_task(conn, b)
    assert (await next_change(sub)).task_id == b
    # Changes go through an index by task id; closing leaves nothing behind in it.
    other = await hub.open(tenant_id)
    other.watch([a])
    other.watch_all()
    assert other.watching is None and sub.watching == {b}
    assert set(hub._tenants[tenant_id].watchers) == {b}
    sub.close()
    assert hub._tenants[tenant_id].watchers == {}
    assert hub._tenants[tenant_id].everything == {other}


async def test_a_failed_read_is_retried(hub, pool, tenant_id, monkeypatch) -> None:
    from hookrelay.outbox.store import changes

    monkeypatch.setattr(hub_module, "RETRY_S", 0.01)
    real, failures = changes.changes_after, list[int]()

    async def flaky(*args, **kwargs):
        if not failures:
            failures.append(1)
            raise ConnectionResetError("the database went away")
        return await real(*args, **kwargs)

    sub = await hub.open(tenant_id)
    sub.watch_all()
    monkeypatch.setattr(changes, "changes_after", flaky)
    task_id = await new_task(pool, tenant_id)
    assert (await next_change(sub)).task_id == task_id and failures


async def test_a_hub_not_started_refuses_to_open_and_numbers_nothing(dsn, tenant_id) -> None:
    idle = StreamHub(Listener(dsn, {}))
    idle.number_soon()  # nothing to number with: no pool yet
    with pytest.raises(RuntimeError, match=r"start\(\) was not called"):
        await idle.open(tenant_id)
    await idle.stop()


async def test_concurrent_first_opens_of_a_tenant_share_it(hub, pool, tenant_id) -> None:
    a, b = await asyncio.gather(hub.open(tenant_id), hub.open(tenant_id))
    assert hub.open_count(tenant_id) == 2
    a.watch_all()
    b.watch_all()
    task_id = await new_task(pool, tenant_id)
    first = await next_change(a)
    assert first.task_id == task_id and first is await next_change(b)


async def test_unwatching_leaves_other_watchers_of_the_task(hub, pool, tenant_id) -> None:
    task_id = await new_task(pool, tenant_id)
    a, b = await hub.open(tenant_id), await hub.open(tenant_id)
    a.watch([task_id])
    b.watch([task_id])
    a.unwatch([task_id])
    assert hub._tenants[tenant_id].watchers == {task_id: {b}}
    async with pool.acquire() as conn:
        await start_task(conn, task_id)
    assert (await next_change(b)).status == "running"
    assert not a._queue


async def test_an_unknown_notification_reads_every_tenant(
    hub, pool, tenant_id, monkeypatch
) -> None:
    from hookrelay.outbox.store import changes

    sub = await hub.open(tenant_id)
    sub.watch_all()
    deaf = dict.fromkeys(hub._listener._callbacks, [lambda payload: None])
    monkeypatch.setattr(hub._listener, "_callbacks", deaf)
    task_id = await new_task(pool, tenant_id)
    async with pool.acquire() as conn:
        await changes.number_pending(conn)  # as another process does
    hub._notified("a payload of some later version")
    assert (await next_change(sub)).task_id == task_id


async def test_live_reads_go_on_past_a_full_page(hub, pool, tenant_id, monkeypatch) -> None:
    monkeypatch.setattr(hub_module, "PAGE", 1)
    sub = await hub.open(tenant_id)
    sub.watch_all()
    task_id = await new_task(pool, tenant_id)
    async with pool.acquire() as conn:
        await start_task(conn, task_id)
        await report_progress(conn, task_id, 50)
    assert [(await next_change(sub)).version for _ in range(3)] == [1, 2, 3]
