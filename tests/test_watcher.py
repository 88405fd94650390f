"""Long polling: ``GET /v1/tasks/{id}?wait=N`` wakes on change, holds no pooled connection."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from hookrelay.outbox.store import KEYS_CHANNEL
from hookrelay.outbox.store.pool import create_pool
from hookrelay.service.server.app import create_app
from tests.support import ADMIN, bearer, eventually

pytestmark = pytest.mark.anyio
HOOK = "http://127.0.0.1:9/hook"


async def new_task(client: httpx.AsyncClient, key: str) -> str:
    r = await client.post("/v1/tasks", json={"type": "t", "callbackUrl": HOOK}, headers=bearer(key))
    return str(r.json()["id"])


@pytest.fixture
async def listening(client) -> None:
    """Until the app's LISTEN is up: its first connect wakes every waiter, as a gap does."""
    await eventually(lambda: client._transport.app.state.watcher.connected)


async def test_wait_returns_soon_after_completion(client, tenant, listening) -> None:
    tid = await new_task(client, tenant["apiKey"])
    started = time.monotonic()
    poll = asyncio.create_task(
        client.get(f"/v1/tasks/{tid}", params={"wait": "10"}, headers=bearer(tenant["apiKey"]))
    )
    await asyncio.sleep(0.3)
    assert not poll.done()
    completed_at = time.monotonic()
    await client.post(f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN)
    r = await asyncio.wait_for(poll, 5)
    woke = time.monotonic()
    assert r.status_code == 200 and r.json()["status"] == "succeeded"
    assert woke - completed_at < 0.5 and woke - started < 5


async def test_wait_times_out_with_current_task(client, tenant, listening) -> None:
    tid = await new_task(client, tenant["apiKey"])
    started = time.monotonic()
    r = await client.get(
        f"/v1/tasks/{tid}", params={"wait": "0.5"}, headers=bearer(tenant["apiKey"])
    )
    assert 0.4 < time.monotonic() - started < 3
    assert r.status_code == 200 and r.json()["status"] == "queued"


async def test_wait_with_stale_etag_returns_at_once(client, tenant) -> None:
    key = bearer(tenant["apiKey"])
    tid = await new_task(client, tenant["apiKey"])
    etag = (await client.get(f"/v1/tasks/{tid}", headers=key)).headers["etag"]
    await client.post(f"/v1/tasks/{tid}/start", headers=ADMIN)
    started = time.monotonic()
    r = await client.get(
        f"/v1/tasks/{tid}", params={"wait": "10"}, headers={**key, "If-None-Match": etag}
    )
    assert r.status_code == 200 and r.json()["status"] == "running"
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("wait", ["-1", "31", "soon"])
async def test_bad_wait_is_400(client, tenant, wait) -> None:
    tid = await new_task(client, tenant["apiKey"])
    r = await client.get(
        f"/v1/tasks/{tid}", params={"wait": wait}, headers=bearer(tenant["apiKey"])
    )
    assert r.status_code == 400


async def test_many_waiters_share_one_listener(runtime, dsn) -> None:
    # A pool of 4 connections serves 250 concurrent long polls.
    pool = await create_pool(dsn, min_size=1, max_size=4)
    app = create_app(runtime, pool=pool)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                t = (
                    await client.post("/v1/admin/tenants", json={"name": "w"}, headers=ADMIN)
                ).json()
                tid = await new_task(client, t["apiKey"])
                await eventually(lambda: app.state.watcher.connected)
                polls = [
                    asyncio.create_task(
                        client.get(
                            f"/v1/tasks/{tid}", params={"wait": "20"}, headers=bearer(t["apiKey"])
                        )
                    )
                    for _ in range(250)
                ]
                await asyncio.sleep(1.0)
                assert not any(p.done() for p in polls)
                # While they all wait, the pool is still free for other work.
                r = await client.get("/readyz")
                assert r.status_code == 200
                completed = time.monotonic()
                await client.post(
                    f"/v1/tasks/{tid}/complete", json={"status": "failed"}, headers=ADMIN
                )
                results = await asyncio.wait_for(asyncio.gather(*polls), 15)
                elapsed = time.monotonic() - completed
        assert all(r.status_code == 200 and r.json()["status"] == "failed" for r in results)
        assert elapsed < 10
    finally:
        await pool.close()


async def test_a_wake_up_for_an_unchanged_task_keeps_waiting(client, tenant, pool) -> None:
    """A notification is a hint: one naming the task (another process numbering its
    creation, a reconnect) while it is unchanged does not end the long-poll."""
    tid = await new_task(client, tenant["apiKey"])
    await eventually(lambda: client._transport.app.state.watcher.connected)
    poll = asyncio.create_task(
        client.get(f"/v1/tasks/{tid}", params={"wait": "10"}, headers=bearer(tenant["apiKey"]))
    )
    await eventually(lambda: client._transport.app.state.watcher._waiters.get(tid))
    await pool.execute("SELECT pg_notify('hookrelay_tasks', $1)", tid)
    client._transport.app.state.watcher.notify(tid)
    await asyncio.sleep(0.3)
    assert not poll.done()
    await client.post(f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN)
    r = await asyncio.wait_for(poll, 5)
    assert r.json()["status"] == "succeeded"


async def test_the_api_listens_on_one_connection(client, pool, listening) -> None:
    # The long polls, the stream hub and the API keys' revocations share one LISTEN: a
    # backend more would be woken by PostgreSQL at every notifying commit.
    state = client._transport.app.state
    assert state.hub._listener is state.watcher._listener is state.listener
    assert KEYS_CHANNEL in state.listener._callbacks  # the revocations'
    await asyncio.sleep(0.5)  # a LISTEN of another connection, if any, would be in place
    listening_backends = await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
    )
    assert listening_backends == 1
