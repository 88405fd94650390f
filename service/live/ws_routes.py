"""``GET /v1/ws``: task changes pushed over a WebSocket.

The socket authenticates with its first message (an API key never goes into a
URL, and browsers cannot set headers on a WebSocket), then counts as one of the
tenant's open streams in the process's stream hub, exactly like an SSE stream.
One loop per socket serves the client's messages, the hub's changes and the
pings in turn, so every message goes out in order from one place; nothing else
is held per socket (no thread, no database connection between messages).
A plain HTTP GET here is answered 426 in the API's error shape.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from hookrelay.service.api.auth import identify
from hookrelay.service.api.errors import error_response
from hookrelay.service.live import ws_messages as msg
from hookrelay.service.live.ws_session import UNAVAILABLE, Session

log = logging.getLogger("hookrelay.api")


async def upgrade_required(request: Request) -> Response:
    return error_response(
        426,
        "upgrade_required",
        "GET /v1/ws is a WebSocket: connect with Upgrade: websocket",
        headers={"Upgrade": "websocket", "Connection": "Upgrade"},
    )


async def _first_message(websocket: WebSocket, timeout_s: float) -> str | None:
    """The first text message, or None if none came in time (or the client left)."""
    try:
        async with asyncio.timeout(timeout_s):
            message = await websocket.receive()
    except TimeoutError:
        return None
    if message["type"] != "websocket.receive":
        raise WebSocketDisconnect(message.get("code", 1000))
    text: str | None = message.get("text")
    return text


async def _tenant(websocket: WebSocket) -> str | None:
    """The tenant whose API key the auth message carries; closes the socket if none."""
    settings = websocket.app.state.settings
    text = await _first_message(websocket, settings.ws_auth_timeout_s)
    if text is None:
        reason = (
            f"send {{'type': 'auth', 'token': ...}} first, within {settings.ws_auth_timeout_s:g} s"
        )
        await websocket.close(msg.CLOSE_UNAUTHORIZED, reason[:120])
        return None
    try:
        message = msg.parse(text)
    except Exception:  # noqa: BLE001 - any unreadable first message is a failed auth
        message = None
    if not isinstance(message, msg.Auth):
        await websocket.close(msg.CLOSE_UNAUTHORIZED, "the first message must be an auth message")
        return None
    try:
        who = await identify(websocket, message.token)
    except UNAVAILABLE:
        await websocket.close(msg.CLOSE_UNAVAILABLE, "the database is unavailable; retry shortly")
        return None
    if who is None:
        await websocket.close(msg.CLOSE_UNAUTHORIZED, "invalid credentials")
        return None
    if who.tenant_id is None:
        await websocket.close(msg.CLOSE_FORBIDDEN, "streams need a tenant API key")
        return None
    return who.tenant_id


async def endpoint(websocket: WebSocket) -> None:
    await websocket.accept()
    try:
        tenant_id = await _tenant(websocket)
        if tenant_id is None:
            return
        session = await Session.open(websocket, tenant_id)
        if session is None:
            return
        await session.run()
    except WebSocketDisconnect:
        pass
    except TimeoutError:  # a send the client did not read for SEND_TIMEOUT_S: it is gone
        log.info("dropped a WebSocket client that stopped reading")


routes = [
    Route("/v1/ws", upgrade_required, methods=["GET"]),
    WebSocketRoute("/v1/ws", endpoint),
]
