"""A real webhook receiver on 127.0.0.1 for end-to-end tests (aiohttp.web, in the test's loop)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float


Behaviour = Callable[[web.Request, "Receiver"], Awaitable[web.StreamResponse]]


async def answer_204(request: web.Request, rx: Receiver) -> web.StreamResponse:
    return web.Response(status=204)


@dataclass
class Receiver:
    behaviour: Behaviour = answer_204
    received: list[Received] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    state: dict[str, Any] = field(default_factory=dict)
    # Where it listens, and with ``tls`` it speaks https (``url_for`` names it).
    bind: str = "127.0.0.1"
    tls: ssl.SSLContext | None = None

    @property
    def url(self) -> str:
        return self.url_for(self.bind)

    def url_for(self, host: str) -> str:
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}/hook"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.received.append(Received(dict(request.headers), body, time.time()))
        self.arrived.set()
        return await self.behaviour(request, self)

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.bind, 0, ssl_context=self.tls)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def wait_for(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.received) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"receiver got {len(self.received)} of {count} requests")
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), 0.2)

    def event_ids(self) -> list[str]:
        return [r.headers["webhook-id"] for r in self.received]


def failing_until_healthy(status: int = 500, text: str = "") -> Receiver:
    """Answers ``status`` (and ``text``) until ``rx.state["healthy"]["ok"]`` is set, then 204."""
    healthy = {"ok": False}

    async def endpoint(request: web.Request, rx: Receiver) -> web.StreamResponse:
        if healthy["ok"]:
            return web.Response(status=204)
        return web.Response(status=status, text=text)

    rx = Receiver(behaviour=endpoint)
    rx.state["healthy"] = healthy
    return rx
