"""``GET /v1/ws``: the auth message, its deadline and every way it can fail, over real sockets."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from hookrelay.service.live import ws_messages as msg
from tests.support import ADMIN, ADMIN_TOKEN

pytestmark = pytest.mark.anyio


async def new_tenant(url: str, name: str = "acme") -> str:
    """A tenant's API key."""
    async with httpx.AsyncClient(base_url=url) as c:
        r = await c.post("/v1/admin/tenants", json={"name": name}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return str(r.json()["apiKey"])


# Only a guard against a hung test, never a measure: a loaded machine gets all of it.
HANG_S = 60


async def recv(ws: ClientConnection, *skip: str) -> dict[str, Any]:
    """The next message that is not of a type in ``skip`` (e.g. "ping")."""
    while True:
        text = await asyncio.wait_for(ws.recv(decode=True), HANG_S)
        message: dict[str, Any] = json.loads(text)
        if message["type"] not in skip:
            return message


async def closed_with(ws: ClientConnection) -> tuple[int, str]:
    """Read until the server closes; its close code and reason."""
    with pytest.raises(ConnectionClosed) as info:
        while True:
            await asyncio.wait_for(ws.recv(), HANG_S)
    assert info.value.rcvd is not None, "closed without a close frame"
    return info.value.rcvd.code, info.value.rcvd.reason


async def authed(served: Any, key: str) -> ClientConnection:
    """An open socket past its auth message (the caller closes it)."""
    ws = await connect(served.ws)
    await ws.send(json.dumps({"type": "auth", "token": key}))
    ready = await recv(ws)
    assert ready["type"] == "ready", ready
    return ws


async def test_no_auth_message_in_time_is_closed_4401(serve_app) -> None:
    async with serve_app(ws_auth_timeout_s=0.3) as served, connect(served.ws) as ws:
        code, reason = await closed_with(ws)
    assert code == msg.CLOSE_UNAUTHORIZED and "auth" in reason


@pytest.mark.parametrize(
    "first",
    [
        json.dumps({"type": "auth", "token": "hr_not-a-key"}),
        json.dumps({"type": "subscribe", "all": True}),
        json.dumps({"type": "auth"}),
        "not json",
        b"\x00binary",
    ],
    ids=["wrong key", "not auth", "no token", "not json", "binary"],
)
async def test_a_wrong_or_missing_token_is_closed_4401(serve_app, first: Any) -> None:
    async with serve_app() as served, connect(served.ws) as ws:
        await new_tenant(served.url)
        await ws.send(first)
        code, _ = await closed_with(ws)
    assert code == msg.CLOSE_UNAUTHORIZED


async def test_the_admin_token_is_not_a_tenant_4403(serve_app) -> None:
    async with serve_app() as served, connect(served.ws) as ws:
        await ws.send(json.dumps({"type": "auth", "token": ADMIN_TOKEN}))
        code, reason = await closed_with(ws)
    assert code == msg.CLOSE_FORBIDDEN and "tenant" in reason


async def test_a_tenant_key_gets_ready_with_the_sockets_limits(serve_app) -> None:
    async with serve_app(ws_max_subscriptions=7, ws_ping_s=12) as served:
        key = await new_tenant(served.url)
        async with connect(served.ws) as ws:
            await ws.send(json.dumps({"type": "auth", "token": key}))
            ready = await recv(ws)
    assert ready == {"type": "ready", "maxSubscriptions": 7, "pingIntervalSeconds": 12}


async def test_plain_http_get_is_426_in_the_error_shape(serve_app) -> None:
    async with serve_app() as served, httpx.AsyncClient(base_url=served.url) as c:
        r = await c.get("/v1/ws")
    assert r.status_code == 426 and r.json()["error"]["code"] == "upgrade_required"
    assert r.headers["upgrade"] == "websocket"


async def test_sigterm_with_sockets_open_closes_them_1012_and_exits(runtime, dsn) -> None:
    import signal

    from tests.support import dispatcher_env, free_port, start, wait_for_port

    port = free_port()
    proc = await start("api", dispatcher_env(runtime, dsn, port=str(port), host="127.0.0.1"))
    try:
        await wait_for_port(port, proc)
        url = f"http://127.0.0.1:{port}"
        key = await new_tenant(url)
        sockets = [await connect(f"ws://127.0.0.1:{port}/v1/ws") for _ in range(3)]
        for ws in sockets:
            await ws.send(json.dumps({"type": "auth", "token": key}))
            assert (await recv(ws))["type"] == "ready"
            await ws.send(json.dumps({"type": "subscribe", "all": True}))
            assert (await recv(ws))["type"] == "subscribed"
        proc.send_signal(signal.SIGTERM)
        for ws in sockets:
            code, _ = await closed_with(ws)
            assert code == msg.CLOSE_RESTART
        # Generous: a loaded machine; the point is that it exits at all, and cleanly.
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
