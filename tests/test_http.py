"""Senders against a real receiver on 127.0.0.1: caps, redirects, resets, the guard."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator

import httpx
import pytest
import respx
from aiohttp import web

from hookrelay.outbox.egress.http import USER_AGENT, AiohttpSender, HttpxSender, build_sender
from hookrelay.outbox.egress.ssrf import AddressPolicy
from hookrelay.outbox.errors import BlockedDestination, TransportError
from tests.receiver import Receiver

pytestmark = pytest.mark.anyio
LOOPBACK = AddressPolicy.from_settings("127.0.0.0/8", True)
HEADERS = {"content-type": "application/json", "webhook-id": "evt_1"}


@pytest.fixture
async def s() -> AsyncIterator[AiohttpSender]:
    """A sender allowed to reach 127.0.0.1, closed after the test."""
    sender = AiohttpSender(LOOPBACK, concurrency=10, per_host=5, connect_timeout_s=2.0)
    yield sender
    await sender.aclose()


async def test_posts_body_and_headers(receiver: Receiver, s: AiohttpSender) -> None:
    reply = await s.post(receiver.url, b'{"a":1}', HEADERS, 1000)
    assert reply.status == 204 and reply.body == b""
    got = receiver.received[0]
    assert got.body == b'{"a":1}'
    assert got.headers["webhook-id"] == "evt_1"
    assert got.headers["User-Agent"] == USER_AGENT


async def test_reply_body_is_capped(receiver: Receiver, s: AiohttpSender) -> None:
    async def big(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=200, body=b"x" * 5_000_000)

    receiver.behaviour = big
    reply = await s.post(receiver.url, b"{}", HEADERS, 4096)
    assert reply.status == 200 and len(reply.body) == 4096


async def test_compressed_bomb_is_capped_after_decoding(
    receiver: Receiver, s: AiohttpSender
) -> None:
    bomb = gzip.compress(b"\0" * 50_000_000)  # ~50 kB on the wire

    async def gz(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=200, body=bomb, headers={"Content-Encoding": "gzip"})

    receiver.behaviour = gz
    reply = await s.post(receiver.url, b"{}", HEADERS, 10_000)
    assert reply.body == b"\0" * 10_000


async def test_redirect_is_not_followed(receiver: Receiver, s: AiohttpSender) -> None:
    async def redirect(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": "http://10.0.0.1/"})

    receiver.behaviour = redirect
    reply = await s.post(receiver.url, b"{}", HEADERS, 1000)
    assert reply.status == 307 and reply.headers["location"] == "http://10.0.0.1/"
    assert len(receiver.received) == 1


async def test_reset_connection_is_a_transport_error(receiver: Receiver, s: AiohttpSender) -> None:
    async def reset(request: web.Request, rx: Receiver) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.abort()
        return web.Response(status=200)

    receiver.behaviour = reset
    with pytest.raises(TransportError):
        await s.post(receiver.url, b"{}", HEADERS, 1000)


async def test_refused_connection_is_a_transport_error(
    receiver: Receiver, s: AiohttpSender
) -> None:
    url = receiver.url
    await receiver.stop()
    with pytest.raises(TransportError, match="Connect"):
        await s.post(url, b"{}", HEADERS, 1000)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_guard_refuses_loopback_by_default(receiver: Receiver, host: str) -> None:
    s = build_sender(
        AddressPolicy(allow_http=True), concurrency=1, per_host=1, connect_timeout_s=1.0
    )
    try:
        with pytest.raises(BlockedDestination):
            await s.post(f"http://{host}:{receiver.port}/hook", b"{}", HEADERS, 1000)
    finally:
        await s.aclose()
    assert receiver.received == []


async def test_aclose_before_use_is_fine() -> None:
    await AiohttpSender(LOOPBACK, concurrency=1, per_host=1, connect_timeout_s=1).aclose()


async def test_httpx_sender_maps_errors() -> None:
    with respx.mock:
        respx.post("https://a.example/").mock(side_effect=httpx.ConnectError("refused"))
        s = HttpxSender(httpx.AsyncClient())
        try:
            with pytest.raises(TransportError, match="ConnectError: refused"):
                await s.post("https://a.example/", b"{}", HEADERS, 10)
        finally:
            await s.aclose()


async def test_httpx_sender_caps_body() -> None:
    with respx.mock:
        respx.post("https://a.example/").mock(return_value=httpx.Response(200, content=b"y" * 99))
        s = HttpxSender(httpx.AsyncClient())
        try:
            reply = await s.post("https://a.example/", b"{}", HEADERS, 10)
        finally:
            await s.aclose()
    assert reply.status == 200 and reply.body == b"y" * 10
