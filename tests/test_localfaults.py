"""Our own faults are not the receiver's: the row goes back unspent, logged and counted."""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping
from dataclasses import replace

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from hookrelay.outbox.dispatch.dispatcher import Dispatcher, running
from hookrelay.outbox.egress.http import AiohttpSender, Reply
from hookrelay.outbox.egress.local_faults import as_local_fault
from hookrelay.outbox.egress.ssrf import AddressPolicy
from hookrelay.outbox.errors import LocalFault
from hookrelay.outbox.metrics import LOCAL_FAULTS
from hookrelay.service.server.background import dispatcher_config, make_dispatcher
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
        (RuntimeError("Session is closed"), "pool_closed"),
        (aiohttp.ClientConnectionError("Connector is closed"), "pool_closed"),
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
    ],
)
def test_the_receivers_faults_are_not_ours(exc: BaseException) -> None:
    assert as_local_fault(exc) is None


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
