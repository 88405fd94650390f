"""One authenticated ``/v1/ws`` socket: its subscriptions, its hub subscription, its loop.

The loop waits on three things at once, the client's next message, the hub's next
change and the ping timer, and handles whichever comes first, so the socket's
messages leave in one order from one place. While the client is slow to read,
``send`` waits (uvicorn pauses at its write buffer's high-water mark) and changes
wait in the hub's bounded queue; past that bound the hub drops the subscription
and the socket is closed with :data:`ws_messages.CLOSE_SLOW_CONSUMER`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from starlette.websockets import WebSocket

from hookrelay.outbox.errors import DatabaseUnavailable
from hookrelay.outbox.models import iso
from hookrelay.outbox.store import TRANSIENT_ERRORS, changes
from hookrelay.service.api.errors import ApiError, BadRequest, ServiceUnavailable, Unprocessable
from hookrelay.service.live import ws_messages as msg
from hookrelay.service.live.changes import Change, Reset
from hookrelay.service.live.hub import StreamHub
from hookrelay.service.live.subscription import Subscription

log = logging.getLogger("hookrelay.api")
# The database away: the client is told, the socket stays.
UNAVAILABLE: tuple[type[BaseException], ...] = (DatabaseUnavailable, *TRANSIENT_ERRORS)
# A send the client has not let through (by reading) in this long: it is gone.
SEND_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 2.0


def render(change: Change) -> str:
    """The ``task`` message of a change (the task's JSON is the hub's, rendered once)."""
    return (
        f'{{"type":"task","sequence":{change.seq},"timestamp":{_json(iso(change.at))},'
        f'"status":{_json(change.status)},"progress":{_json(change.progress)},'
        f'"task":{change.data.decode()}}}'
    )


def task_frame(change: Change) -> str:
    """:func:`render`, once per change however many sockets follow it."""
    key = (change.tenant_id, change.seq)
    frame = _FRAMES.get(key)
    if frame is None:
        frame = _FRAMES[key] = render(change)
        if len(_FRAMES) > _FRAME_CACHE:
            del _FRAMES[next(iter(_FRAMES))]
    return frame


# A change reaches its sockets within one turn of the hub's fan-out, so a few
# hundred recent frames cover it; (tenant, seq) names one change for good.
_FRAMES: dict[tuple[str, int], str] = {}
_FRAME_CACHE = 512


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class Session:
    def __init__(self, websocket: WebSocket, tenant_id: str, sub: Subscription) -> None:
        self.websocket, self.tenant_id, self.sub = websocket, tenant_id, sub
        settings = websocket.app.state.settings
        self.ping_s: float = settings.ws_ping_s
        self.max_subscriptions: int = settings.ws_max_subscriptions
        self.task_ids: set[str] = set()
        self.all = False
        self.sent_versions: dict[str, int] = {}  # of the task ids followed one by one
        self.bad = 0

    @classmethod
    async def open(cls, websocket: WebSocket, tenant_id: str) -> Session | None:
        """A session holding one of the tenant's streams; None (socket closed) at the cap."""
        hub: StreamHub = websocket.app.state.hub
        try:
            sub = await hub.open(tenant_id)
        except ApiError as exc:  # the tenant's cap (429), or the process is stopping (503)
            code = msg.CLOSE_TOO_MANY_STREAMS if exc.status == 429 else msg.CLOSE_RESTART
            await websocket.close(code, exc.message[:120])
            return None
        return cls(websocket, tenant_id, sub)

    async def run(self) -> None:
        try:
            await self._send(
                msg.encode(
                    "ready",
                    maxSubscriptions=self.max_subscriptions,
                    pingIntervalSeconds=self.ping_s,
                )
            )
            await self._loop()
        finally:
            self.sub.close()

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        receiving = asyncio.ensure_future(self.websocket.receive())
        changing = asyncio.ensure_future(self.sub.get())
        next_ping = loop.time() + self.ping_s
        try:
            while True:
                done, _ = await asyncio.wait(
                    (receiving, changing),
                    timeout=max(0.0, next_ping - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if receiving in done:
                    if not await self._received(receiving.result()):
                        return
                    receiving = asyncio.ensure_future(self.websocket.receive())
                if changing in done:
                    if not await self._changed(changing.result()):
                        return
                    changing = asyncio.ensure_future(self.sub.get())
                if loop.time() >= next_ping:
                    await self._send(msg.encode("ping"))
                    next_ping = loop.time() + self.ping_s
        finally:
            for pending in (receiving, changing):
                pending.cancel()

    async def _received(self, message: Mapping[str, Any]) -> bool:
        if message["type"] == "websocket.disconnect":
            return False
        text = message.get("text")
        if text is None:
            await self._close(msg.CLOSE_BAD_MESSAGES, "binary frames are not part of this protocol")
            return False
        try:
            parsed = msg.parse(text)
            if parsed is not None:
                await self._handle(parsed)
        except ApiError as exc:
            self.bad += exc.status < 500  # the client's mistakes, not ours
            if self.bad > msg.MAX_BAD_MESSAGES:
                await self._close(msg.CLOSE_BAD_MESSAGES, "too many malformed messages")
                return False
            await self._send(msg.error(exc.code, exc.message, **exc.extra))
        return True

    async def _handle(self, message: msg.Message) -> None:
        if isinstance(message, msg.Ping):
            await self._send(msg.encode("pong"))
        elif isinstance(message, msg.Auth):
            raise BadRequest("this socket is already authenticated", code="already_authenticated")
        elif isinstance(message, msg.Resume):
            self.sub.resume(message.after)
            await self._send(msg.encode("resumed", after=message.after))
        elif isinstance(message, msg.Subscribe):
            await self._subscribe(message)
        else:
            await self._unsubscribe(message)

    async def _subscribe(self, message: msg.Subscribe) -> None:
        if message.all:
            self.all = True
            self.sub.watch_all()
            await self._send(msg.encode("subscribed", all=True))
            return
        wanted = [t for t in message.task_ids if t not in self.task_ids]
        if len(self.task_ids) + len(wanted) > self.max_subscriptions:
            raise Unprocessable(
                f"a socket follows at most {self.max_subscriptions} task ids; "
                f"it follows {len(self.task_ids)}",
                code="too_many_subscriptions",
            )
        # Watch first, read second: a change committed in between is then both in
        # the read and queued, and the queued copy is skipped by its version.
        self.sub.watch(wanted)
        try:
            async with self.websocket.app.state.pool.acquire() as conn:
                # Numbered first, so the current version comes with its sequence.
                await changes.number_pending(conn)
                current = await changes.current_changes(
                    conn, tenant_id=self.tenant_id, task_ids=wanted
                )
        except UNAVAILABLE:
            self.sub.unwatch(wanted)
            raise ServiceUnavailable(
                "the database is unavailable; subscribe again shortly"
            ) from None
        found = {c.task.id: Change.from_logged(c) for c in current}
        missing = [t for t in wanted if t not in found]
        if missing:
            self.sub.unwatch(missing)
            # Another tenant's task and no task at all read the same: existence is not told.
            await self._send(
                msg.error(
                    "unknown_tasks",
                    f"no such task(s): {', '.join(missing)[:400]}",
                    taskIds=missing,
                )
            )
        if not found:
            return
        self.task_ids.update(found)
        await self._send(msg.encode("subscribed", taskIds=list(found)))
        for change in found.values():
            self.sent_versions[change.task_id] = change.version
            await self._send(render(change))

    async def _unsubscribe(self, message: msg.Unsubscribe) -> None:
        self.sub.unwatch(message.task_ids)
        self.task_ids.difference_update(message.task_ids)
        for task_id in message.task_ids:
            self.sent_versions.pop(task_id, None)
        await self._send(msg.encode("unsubscribed", taskIds=list(message.task_ids)))

    async def _changed(self, item: Change | Reset | None) -> bool:
        if item is None:  # the hub dropped this subscription
            if self.sub.reason == "slow_consumer":
                await self._close(msg.CLOSE_SLOW_CONSUMER, "too far behind: reconnect and resume")
            else:
                await self._close(msg.CLOSE_RESTART, "the server is stopping: reconnect and resume")
            return False
        if isinstance(item, Reset):
            await self._send(
                msg.encode(
                    "reset",
                    code=item.code,
                    message=item.to_resource()["message"],
                    after=item.after,
                    resumeAfter=item.resume_after,
                )
            )
            return True
        sent = self.sent_versions.get(item.task_id)
        if sent is not None:
            if item.version <= sent:
                return True  # already shown by the subscribe's current state
            self.sent_versions[item.task_id] = item.version
        await self._send(task_frame(item))
        return True

    async def _send(self, text: str) -> None:
        async with asyncio.timeout(SEND_TIMEOUT_S):
            await self.websocket.send_text(text)

    async def _close(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self.websocket.close(code, reason)
