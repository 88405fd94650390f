"""Our own faults are not the receiver's: the row goes back unspent, logged and counted."""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import Mapping
from dataclasses import replace

import aiohttp
import pytest
from aiohttp import web
from aiohttp.client_reqrep import ConnectionKey

from hookrelay.outbox.dispatch.dispatcher import Dispatcher, running
from hookrelay.outbox.egress.http import AiohttpSender, Reply
from hookrelay.outbox.egress.local_faults import as_local_fault
from hookrelay.outbox.egress.ssrf import AddressPolicy
from hookrelay.outbox.errors import LocalFault
from hookrelay.outbox.metrics import LOCAL_FAULTS
from hookrelay.service.server.background import dispatcher_config, make_dispatcher
from tests.receiver import Receiver
from tests.support import backlog, eventually, wait_drained

pytestmark = pytest.mark.anyio

KEY = ConnectionKey("h.test", 443, True, True, None, None, None)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (OSError(errno.EMFILE, "Too many open files"), "out_of_fds"),
        (OSError(errno.ENFILE, "Too many open files in system"), "out_of_fds"),
        (OSError(errno.ENOBUFS, "No buffer space available"), "out_of_memory"),
        (OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"), "no_local_ports"),
        (
            aiohttp.ClientConnectorError(KEY, OSError(errno.EMFILE, "Too many open files")),
            "out_of_fds",
        ),
        (LocalFault("resolver_unavailable", "x"), "resolver_unavailable"),
    ],
)
def test_recognised(exc: BaseException, kind: str) -> None:
    found = as_local_fault(exc)
    assert found is not None and found.kind == kind


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
        aiohttp.ClientConnectorError(KEY, ConnectionResetError(errno.ECONNRESET, "reset")),
        TimeoutError(),
        aiohttp.ServerDisconnectedError(),
        RuntimeError("something else"),
        # Texts a receiver can put in its status line or headers, which aiohttp's
        # errors quote: what an exception says never makes a fault ours.
        RuntimeError("Session is closed"),
        aiohttp.ClientConnectionError("Connector is closed"),
        aiohttp.ServerDisconnectedError("HTTP/1.1 500 Session is closed"),
        aiohttp.ClientOSError("Too many open files"),
        aiohttp.ClientPayloadError("[Errno 24] Too many open files"),
        OSError("[Errno 99] Cannot assign requested address"),
        # An SSLError's errno is OpenSSL's code from the TLS exchange, not a POSIX errno.
        ssl.SSLError(errno.EMFILE, "a TLS alert"),
    ],
)
def test_the_receivers_faults_are_not_ours(exc: BaseException) -> None:
    assert as_local_fault(exc) is None


def test_a_local_faults_detail_quotes_no_exception_text() -> None:
    exc = aiohttp.ClientOSError(errno.EMFILE, "Too many open files \x1b[2J from the receiver")
    found = as_local_fault(exc)
    assert found is not None and found.kind == "out_of_fds"
    assert "receiver" not in found.detail and "[Errno 24]" in found.detail


def loopback_sender() -> AiohttpSender:
    return AiohttpSender(
        AddressPolicy.from_settings("127.0.0.0/8", allow_http=True),
        concurrency=10,
        per_host=10,
        connect_timeout_s=1.0,
    )


async def test_a_closed_pool_is_ours_by_its_state(receiver) -> None:
    sender = loopback_sender()
    assert (await sender.post(receiver.url, b"{}", {}, 100)).status == 204
    await sender.aclose()
    with pytest.raises(LocalFault) as caught:
        await sender.post(receiver.url, b"{}", {}, 100)
    assert caught.value.kind == "pool_closed"


async def test_a_pool_closed_mid_attempt_is_ours(receiver) -> None:
    async def hang(request: web.Request, rx: Receiver) -> web.StreamResponse:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    receiver.behaviour = hang
    sender = loopback_sender()
    posting = asyncio.ensure_future(sender.post(receiver.url, b"{}", {}, 100))
    await receiver.wait_for(1)
    await sender.aclose()
    with pytest.raises(LocalFault) as caught:
        await posting
    assert caught.value.kind == "pool_closed"


class FlakySender:
    """Fails the first ``faults`` posts with a local fault, then sends for real."""

    def __init__(self, faults: int) -> None:
        self.left = faults
        self.real = AiohttpSender(
            AddressPolicy.from_settings("127.0.0.0/8", allow_http=True),
            concurrency=10,
            per_host=10,
            connect_timeout_s=1.0,
        )

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], cap: int) -> Reply:
        if self.left > 0:
            self.left -= 1
            raise LocalFault("out_of_fds", "[Errno 24] Too many open files")
        return await self.real.post(url, body, headers, cap)

    async def aclose(self) -> None:
        await self.real.aclose()


async def test_a_local_fault_spends_no_attempt(pool, runtime, receiver) -> None:
    _, events = await backlog(pool, runtime, receiver.url, 3)
    before = LOCAL_FAULTS.labels("out_of_fds")._value.get()
    d = Dispatcher(
        pool,
        runtime.dsn,
        FlakySender(3),
        runtime.secret_box,
        dispatcher_config(runtime),
        owns_sender=True,
    )
    async with running(d):
        await receiver.wait_for(3)
        await wait_drained(pool)
    assert sorted(receiver.event_ids()) == sorted(events)
    assert d.counters["local_faults"] == 3
    assert LOCAL_FAULTS.labels("out_of_fds")._value.get() - before == 3
    # Each event's one recorded attempt is its first: the faults were never charged.
    attempts = await pool.fetch("SELECT number, outcome FROM delivery_attempts")
    assert sorted((r["number"], r["outcome"]) for r in attempts) == [(1, "delivered")] * 3


async def test_an_unreachable_resolver_holds_events_unspent(pool, runtime, receiver) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    dead_port = sock.getsockname()[1]
    sock.close()
    rt = replace(runtime, settings=replace(runtime.settings, dns_servers=f"127.0.0.1:{dead_port}"))
    await backlog(pool, rt, f"http://hooks.test:{receiver.port}/hook", 2)
    async with running(make_dispatcher(rt, pool)) as d:
        await eventually(lambda: d.counters["local_faults"] >= 2, what="two local faults")
    rows = await pool.fetch("SELECT attempts, budget_used FROM outbox")
    assert [tuple(r) for r in rows] == [(0, 0), (0, 0)]
    assert await pool.fetchval("SELECT count(*) FROM delivery_attempts") == 0
    assert await pool.fetchval("SELECT count(*) FROM dead_letters") == 0
    assert receiver.received == []
