"""``GET /v1/ws`` after auth: subscriptions, pushed changes, resume, limits, pings, slow readers."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
from typing import Any

import asyncpg
import httpx
import pytest
from websockets.asyncio.client import connect

from hookrelay.outbox import report_progress, start_task
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.service.live import ws_messages as msg
from tests.support import ADMIN, eventually, purge_changes
from tests.test_ws import closed_with, new_tenant, recv

pytestmark = pytest.mark.anyio


async def tenant_of(pool: asyncpg.Pool, key: str) -> str:
    from hookrelay.outbox.tenants import authenticate

    async with pool.acquire() as conn:
        tenant_id = await authenticate(conn, key)
    assert tenant_id is not None
    return tenant_id


async def new_task(pool: asyncpg.Pool, tenant_id: str, **fields: Any) -> str:
    async with pool.acquire() as conn:
        task, _ = await create_task(
            conn, tenant_id, NewTask(type="t", callback_url="http://127.0.0.1:9/hook", **fields)
        )
    return task.id


async def auth(ws: Any, key: str) -> None:
    await ws.send(json.dumps({"type": "auth", "token": key}))
    assert (await recv(ws))["type"] == "ready"


async def send(ws: Any, **message: Any) -> None:
    await ws.send(json.dumps(message))


async def test_subscribe_sends_the_current_state_then_each_change(serve_app, pool) -> None:
    async with serve_app() as served:
        key = await new_tenant(served.url)
        task_id = await new_task(pool, await tenant_of(pool, key))
        async with connect(served.ws) as ws:
            await auth(ws, key)
            await send(ws, type="subscribe", taskIds=[task_id, task_id])
            assert await recv(ws) == {"type": "subscribed", "taskIds": [task_id]}
            now = await recv(ws)
            assert now["type"] == "task" and now["status"] == "queued"
            assert now["task"]["id"] == task_id and now["task"]["version"] == 1
            assert now["progress"] is None and now["sequence"] >= 1

            async with pool.acquire() as conn:
                await start_task(conn, task_id)
                await report_progress(conn, task_id, 40, "half way")
            running = await recv(ws, "ping")
            assert running["status"] == "running" and running["task"]["version"] == 2
            moved = await recv(ws, "ping")
            assert moved["progress"]["percent"] == 40 and moved["progress"]["message"] == "half way"
            assert moved["task"]["progress"] == moved["progress"] and moved["timestamp"]
            assert now["sequence"] < running["sequence"] < moved["sequence"]
            async with httpx.AsyncClient(base_url=served.url) as c:
                shown = (await c.get(f"/v1/tasks/{task_id}", headers=ADMIN)).json()
            assert moved["task"] == shown  # the same resource GET /v1/tasks/{id} shows


async def test_another_tenants_task_is_refused_like_an_unknown_one(serve_app, pool) -> None:
    async with serve_app() as served:
        mine_key, theirs_key = await new_tenant(served.url), await new_tenant(served.url, "b")
        mine = await new_task(pool, await tenant_of(pool, mine_key))
        theirs = await new_task(pool, await tenant_of(pool, theirs_key))
        unknown = "task_" + "a" * 26
        async with connect(served.ws) as ws:
            await auth(ws, mine_key)
            await send(ws, type="subscribe", taskIds=[theirs, unknown, mine])
            refused = await recv(ws)
            assert refused["type"] == "error" and refused["code"] == "unknown_tasks"
            assert refused["taskIds"] == [theirs, unknown]
            # The same words for both: the message does not tell which one exists.
            assert refused["message"] == f"no such task(s): {theirs}, {unknown}"
            assert await recv(ws) == {"type": "subscribed", "taskIds": [mine]}
            assert (await recv(ws))["task"]["id"] == mine
            async with pool.acquire() as conn:
                await start_task(conn, theirs)  # never reaches this socket
                await start_task(conn, mine)
            assert (await recv(ws, "ping"))["task"]["id"] == mine


async def test_all_follows_every_task_of_the_tenant_only(serve_app, pool) -> None:
    async with serve_app() as served:
        key, other = await new_tenant(served.url), await new_tenant(served.url, "b")
        tenant_id = await tenant_of(pool, key)
        async with connect(served.ws) as ws:
            await auth(ws, key)
            await send(ws, type="subscribe", all=True)
            assert await recv(ws) == {"type": "subscribed", "all": True}
            await new_task(pool, await tenant_of(pool, other))
            created = await new_task(pool, tenant_id)
            got = await recv(ws, "ping")
            assert got["task"]["id"] == created and got["status"] == "queued"


async def test_the_subscription_cap_is_an_error_and_the_socket_stays(serve_app, pool) -> None:
    async with serve_app(ws_max_subscriptions=2) as served:
        key = await new_tenant(served.url)
        tenant_id = await tenant_of(pool, key)
        ids = [await new_task(pool, tenant_id) for _ in range(3)]
        async with connect(served.ws) as ws:
            await auth(ws, key)
            await send(ws, type="subscribe", taskIds=ids)
            over = await recv(ws)
            assert over["type"] == "error" and over["code"] == "too_many_subscriptions"
            await send(ws, type="subscribe", taskIds=ids[:2])
            assert (await recv(ws))["taskIds"] == ids[:2]
            await recv(ws), await recv(ws)  # their current state
            await send(ws, type="unsubscribe", taskIds=[ids[0]])
            assert await recv(ws) == {"type": "unsubscribed", "taskIds": [ids[0]]}
            await send(ws, type="subscribe", taskIds=[ids[2]])
            assert (await recv(ws))["taskIds"] == [ids[2]]


async def test_resume_after_a_disconnect_replays_with_no_gap_and_no_duplicate(
    serve_app, pool
) -> None:
    async with serve_app() as served:
        key = await new_tenant(served.url)
        tenant_id = await tenant_of(pool, key)
        task_id = await new_task(pool, tenant_id)
        async with connect(served.ws) as ws:
            await auth(ws, key)
            await send(ws, type="subscribe", all=True)
            await recv(ws)
            async with pool.acquire() as conn:
                await start_task(conn, task_id)
            last = (await recv(ws, "ping"))["sequence"]
        # Disconnected: these happen while nobody listens.
        missed = [await new_task(pool, tenant_id)]
        async with pool.acquire() as conn:
            for percent in (10, 20, 30):
                await report_progress(conn, task_id, percent)
        async with connect(served.ws) as ws:
            await auth(ws, key)
            await send(ws, type="subscribe", all=True)
            await recv(ws)
            await send(ws, type="resume", after=last)
            assert await recv(ws) == {"type": "resumed", "after": last}
            replayed = [await recv(ws, "ping") for _ in range(4)]
            async with pool.acquire() as conn:
                await report_progress(conn, task_id, 40)
            live = await recv(ws, "ping")
        sequences = [m["sequence"] for m in [*replayed, live]]
        assert sequences == list(range(last + 1, last + 6))
        assert replayed[0]["task"]["id"] == missed[0]
        assert [m["progress"]["percent"] for m in replayed[1:]] == [10, 20, 30]
        assert live["progress"]["percent"] == 40


async def test_malformed_messages_are_errors_then_4400(serve_app) -> None:
    async with serve_app() as served:
        key = await new_tenant(served.url)
        async with connect(served.ws) as ws:
            await auth(ws, key)
            await ws.send("{nope")
            assert (await recv(ws))["code"] == "invalid_json"
            await send(ws, type="subscribe")
            assert (await recv(ws))["code"] == "invalid_message"
            await send(ws, type="auth", token=key)
            assert (await recv(ws))["code"] == "already_authenticated"
            await send(ws, type="ping")
            assert await recv(ws) == {"type": "pong"}
            for _ in range(msg.MAX_BAD_MESSAGES - 3):  # the three above counted
                await send(ws, type="dance")
                assert (await recv(ws))["type"] == "error"
            await send(ws, type="dance")
            code, _ = await closed_with(ws)
        assert code == msg.CLOSE_BAD_MESSAGES
        async with connect(served.ws) as ws:
            await auth(ws, key)
            await ws.send(b"binary")
            code, _ = await closed_with(ws)
        assert code == msg.CLOSE_BAD_MESSAGES


async def test_the_tenants_stream_cap_counts_sockets_4429(serve_app, pool) -> None:
    async with serve_app(streams_per_tenant=1) as served:
        key = await new_tenant(served.url)
        tenant_id = await tenant_of(pool, key)
        async with connect(served.ws) as first, connect(served.ws) as second:
            await auth(first, key)
            await send(second, type="auth", token=key)
            code, reason = await closed_with(second)
            assert code == msg.CLOSE_TOO_MANY_STREAMS and "1 streams open" in reason
            assert "HOOKRELAY_" not in reason
            async with httpx.AsyncClient(base_url=served.url) as c:
                r = await c.get("/v1/events", headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 429  # SSE and WebSocket count together
            await first.close()
            await eventually(lambda: served.app.state.hub.open_count(tenant_id) == 0)
        async with connect(served.ws) as third:
            await auth(third, key)  # the freed place is taken again


async def test_pings_are_sent_and_a_silent_client_is_dropped(serve_app) -> None:
    async with serve_app(ws_ping_s=0.2) as served:
        key = await new_tenant(served.url)
        async with connect(served.ws) as ws:
            await auth(ws, key)
            assert await recv(ws) == {"type": "ping"}  # the browser-visible one
            assert await recv(ws) == {"type": "ping"}
        # A client that never answers the protocol's pings: closed by the server.
        reader, writer = await asyncio.open_connection("127.0.0.1", int(served.url.split(":")[-1]))
        writer.write(handshake(served.url))
        await writer.drain()
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101")
        while await reader.read(4096):  # pings arrive, unanswered, until the server closes
            pass
        writer.close()


def handshake(url: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    host = url.removeprefix("http://")
    return (
        f"GET /v1/ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


def frame(text: str) -> bytes:
    """A masked client text frame (RFC 6455, 5.2)."""
    data, mask = text.encode(), os.urandom(4)
    head = bytes([0x81])
    if len(data) < 126:
        head += bytes([0x80 | len(data)])
    else:
        head += bytes([0x80 | 126]) + len(data).to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))


async def test_a_client_that_stops_reading_is_dropped_not_buffered(serve_app, pool) -> None:
    async with serve_app() as served:
        hub = served.app.state.hub
        hub.queue_size = 2
        key = await new_tenant(served.url)
        tenant_id = await tenant_of(pool, key)
        # Large resources fill the socket buffers after a few changes.
        task_id = await new_task(pool, tenant_id, input={"blob": "x" * 400_000})
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", int(served.url.split(":")[-1])))
        sock.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=sock)
        writer.write(handshake(served.url))
        await reader.readuntil(b"\r\n\r\n")
        writer.write(frame(json.dumps({"type": "auth", "token": key})))
        writer.write(frame(json.dumps({"type": "subscribe", "taskIds": [task_id]})))
        await writer.drain()
        await eventually(lambda: hub.open_count(tenant_id) == 1)
        async with pool.acquire() as conn:  # never read from here on
            await start_task(conn, task_id)
            for percent in range(1, 40):
                await report_progress(conn, task_id, percent)
                if hub.open_count(tenant_id) == 0:
                    break
        await eventually(lambda: hub.open_count(tenant_id) == 0, what="the slow reader dropped")
        writer.close()


async def test_past_the_retained_log_resume_says_reset_and_goes_on(serve_app, pool) -> None:
    async with serve_app() as served:
        key = await new_tenant(served.url)
        tenant_id = await tenant_of(pool, key)
        task_id = await new_task(pool, tenant_id)
        async with pool.acquire() as conn:
            await start_task(conn, task_id)
            await report_progress(conn, task_id, 50)
        # Retention purged all but the last change (seq 3); the task's current state
        # is then read with sequence 0 on a subscribe only if its own change is gone.
        await purge_changes(pool, "tenant_id = $1 AND seq < 3", tenant_id)
        async with connect(served.ws) as ws:
            await auth(ws, key)
            await send(ws, type="subscribe", all=True)
            await recv(ws)
            await send(ws, type="resume", after=0)
            await recv(ws)  # resumed
            reset = await recv(ws, "ping")
            assert reset["type"] == "reset" and reset["code"] == "history_expired"
            assert reset["after"] == 0 and reset["resumeAfter"] == 2
            assert "GET /v1/tasks?updatedAfter=" in reset["message"]
            assert (await recv(ws, "ping"))["sequence"] == 3
        await purge_changes(pool, "tenant_id = $1", tenant_id)
        async with connect(served.ws) as ws:
            await auth(ws, key)
            await send(ws, type="subscribe", taskIds=[task_id])
            await recv(ws)
            now = await recv(ws)
        assert now["sequence"] == 0 and now["task"]["progress"]["percent"] == 50


async def test_the_database_away_is_said_and_the_socket_stays(serve_app, pool, monkeypatch) -> None:
    from hookrelay.outbox.store import changes
    from hookrelay.service.live import ws_routes as route

    async def away(*args: Any, **kwargs: Any) -> Any:
        raise asyncpg.CannotConnectNowError("the database system is starting up")

    async with serve_app() as served:
        key = await new_tenant(served.url)
        task_id = await new_task(pool, await tenant_of(pool, key))
        async with connect(served.ws) as ws:
            await auth(ws, key)
            monkeypatch.setattr(changes, "current_changes", away)
            await send(ws, type="subscribe", taskIds=[task_id])
            told = await recv(ws)
            assert told["type"] == "error" and told["code"] == "unavailable"
            monkeypatch.undo()
            await send(ws, type="subscribe", taskIds=[task_id])
            assert (await recv(ws))["type"] == "subscribed"
        monkeypatch.setattr(route, "identify", away)
        async with connect(served.ws) as ws:
            await send(ws, type="auth", token=key)
            code, _ = await closed_with(ws)
        assert code == msg.CLOSE_UNAVAILABLE
