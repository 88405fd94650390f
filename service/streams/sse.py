"""Server-Sent Events on the wire: event framing, the heartbeat, the streaming response.

Each stream is an async generator of already-framed bytes. The response
watches for the client going away while it waits (a stream may stay silent
for long), and a stream ends when its subscription does: after a terminal
state, when the consumer fell too far behind, or when the process shuts down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from hookrelay.service.live.changes import Change, Reset, render
from hookrelay.service.live.subscription import Subscription

log = logging.getLogger("hookrelay.streams")
PING = b": ping\n\n"
END = {"type": "http.response.body", "body": b"", "more_body": False}
HEADERS = {
    "Cache-Control": "no-store",
    # Proxies such as nginx would otherwise hold events back in their buffers.
    "X-Accel-Buffering": "no",
}


def frame(event: str, data: bytes, event_id: int | None = None) -> bytes:
    """One event; ``data`` is compact JSON, so it is one line."""
    head = f"event: {event}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return head.encode() + b"data: " + data + b"\n\n"


def reset_frame(data: dict[str, Any], event_id: int | None = None) -> bytes:
    return frame("reset", render(data), event_id)


async def items(sub: Subscription, heartbeat_s: float) -> AsyncIterator[Change | Reset | bytes]:
    """The subscription's items, with :data:`PING` after every ``heartbeat_s`` of silence;
    ends with the subscription."""
    while True:
        try:
            async with asyncio.timeout(heartbeat_s):
                item = await sub.get()
        except TimeoutError:
            yield PING
            continue
        if item is None:
            return
        yield item


def task_frame(change: Change, event_id: int) -> bytes:
    return frame("task", change.data, event_id)


class EventStream(StreamingResponse):
    """``text/event-stream`` that always watches for a disconnect, and runs
    ``on_close`` however the stream ends."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(content, headers=HEADERS)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:

                async def stream() -> None:
                    try:
                        await self.stream_response(send)
                    except Exception as exc:  # the database went away mid-stream, say
                        # Headers are sent: no error answer is possible any more. End the
                        # stream properly; the client resumes with its Last-Event-ID.
                        log.warning("event stream ended early: %r", exc)
                        with contextlib.suppress(Exception):  # the client may be gone too
                            await send(END)
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                await self.listen_for_disconnect(receive)
                group.cancel_scope.cancel()
        finally:
            self._on_close()
