"""The egress proxy (outbox/egress/proxy.py): CONNECT to the checked address, faults told apart.

Against a proxy of the test's own, which records what it was asked to connect to, and
against Debian's tinyproxy (.ci/run installs it; under CI a missing one fails).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.egress.dns import Resolver
from hookrelay.outbox.egress.http import AiohttpSender
from hookrelay.outbox.egress.proxy import EgressProxy, TunnelRefused, open_tunnel
from hookrelay.outbox.egress.ssrf import AddressPolicy
from hookrelay.outbox.errors import ConfigurationError, LocalFault, TransportError
from hookrelay.outbox.metrics import LOCAL_FAULTS
from hookrelay.service.server.prerequisites import Runtime
from tests.certs import Issued, issue, server_context
from tests.fakedns import FakeDns
from tests.harness.procs import free_port
from tests.harness.tinyproxy import Tinyproxy, tinyproxy_binary
from tests.receiver import Receiver
from tests.support import backlog, dispatcher, eventually, wait_drained

pytestmark = pytest.mark.anyio


@dataclass
class RecordingProxy:
    """A forward proxy that records each request line, answers CONNECT with ``answer``
    (200 opens the tunnel) and pipes the tunnel's bytes both ways."""

    answer: int = 200
    port: int = 0
    requests: list[str] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def asked(self) -> list[str]:
        """The CONNECT targets, in order."""
        return [r.split(" ")[1] for r in self.requests if r.startswith("CONNECT ")]

    async def start(self, port: int = 0) -> RecordingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_w: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line = head.split(b"\r\n", 1)[0].decode()
            self.requests.append(line)
            method, target, _ = line.split(" ")
            if method != "CONNECT" or self.answer != 200:
                code = 405 if method != "CONNECT" else self.answer
                writer.write(f"HTTP/1.1 {code} Nope\r\nContent-Length: 0\r\n\r\n".encode())
                await writer.drain()
                return
            host, _, port = target.rpartition(":")
            try:
                up_r, up_w = await asyncio.open_connection(host.strip("[]"), int(port))
            except OSError:
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
                await writer.drain()
                return
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()

            async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
                with contextlib.suppress(OSError):
                    while chunk := await src.read(65536):
                        dst.write(chunk)
                        await dst.drain()
                dst.close()

            await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            if up_w is not None:
                up_w.close()


@pytest.fixture
async def proxy() -> AsyncIterator[RecordingProxy]:
    p = await RecordingProxy().start()
    yield p
    await p.stop()


@pytest.fixture
async def dns() -> AsyncIterator[FakeDns]:
    server = await FakeDns(
        records={
            "hooks.test": (["127.0.0.1"], 60),
            "inside.test": (["127.0.0.2"], 60),
            # Dual-stack: the resolver orders ::1 first (RFC 6724), as for localhost.
            "dual.test": (["::1", "127.0.0.1"], 60),
        }
    ).start()
    yield server
    server.stop()


@pytest.fixture
def ca() -> Issued:
    return issue("hookrelay test CA", ca=True)


@pytest.fixture
async def tls_receiver(tmp_path: Path, ca: Issued) -> AsyncIterator[Receiver]:
    """An https receiver on 127.0.0.1 whose certificate, for hooks.test, the test CA signed."""
    server = issue("hooks.test", by=ca, hosts=("hooks.test",))
    rx = await Receiver(tls=server_context(tmp_path, server)).start()
    yield rx
    await rx.stop()


@pytest.fixture
def tinyproxy() -> Iterator[Tinyproxy]:
    binary = tinyproxy_binary()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("tinyproxy is not installed; CI must run the egress proxy tests (.ci/run)")
        pytest.skip("tinyproxy is not installed (apt-get install tinyproxy)")
    tp = Tinyproxy(binary)
    yield tp
    tp.stop()


def with_settings(runtime: Runtime, **changes: Any) -> Runtime:
    return replace(runtime, settings=replace(runtime.settings, **changes))


def ca_file(tmp_path: Path, ca: Issued) -> Path:
    path = tmp_path / "extra-ca.pem"
    path.write_bytes(ca.cert_pem)
    return path


async def attempts(pool: Any) -> list[tuple[int, str, str | None]]:
    rows = await pool.fetch("SELECT number, outcome, error FROM delivery_attempts ORDER BY id")
    return [(r["number"], r["outcome"], r["error"]) for r in rows]


# -- the setting ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [
        ("http://proxy.internal:3128", "proxy.internal", 3128),
        ("http://10.0.0.5:8888/", "10.0.0.5", 8888),
        ("http://[fd00::5]:3128", "fd00::5", 3128),
    ],
)
def test_the_proxy_url(url: str, host: str, port: int) -> None:
    proxy = EgressProxy.from_url(url)
    assert (proxy.host, proxy.port) == (host, port)
    assert EgressProxy.from_url(str(proxy)) == proxy


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://proxy:3128", "expected http://host:port"),
        ("socks5://proxy:1080", "expected http://host:port"),
        ("http://user:pw@proxy:3128", "credentials"),
        ("http://proxy:3128/path", "no path"),
        ("http://proxy", "no port"),
        ("http://:3128", "no host"),
        ("http://proxy:99999", "out of range"),
    ],
)
def test_a_bad_proxy_url_names_the_variable(url: str, why: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        EgressProxy.from_url(url)
    assert "HOOKRELAY_EGRESS_PROXY" in str(caught.value) and why in str(caught.value)


# -- the path through a proxy ------------------------------------------------------------


async def test_https_is_tunnelled_to_the_checked_address(
    pool, runtime, dns, proxy, tls_receiver, tmp_path, ca
) -> None:
    rt = with_settings(
        runtime,
        egress_proxy=proxy.url,
        dns_servers=dns.server,
        ca_bundle=ca_file(tmp_path, ca),
    )
    _, events = await backlog(pool, rt, tls_receiver.url_for("hooks.test"), 3)
    async with running(dispatcher(rt, pool)):
        await wait_drained(pool)
    assert sorted(tls_receiver.event_ids()) == sorted(events)
    # The proxy was asked for the address the dispatcher resolved and checked, never
    # the name (its own DNS could rebind it); Host and SNI keep the name.
    assert proxy.asked and set(proxy.asked) == {f"127.0.0.1:{tls_receiver.port}"}
    assert {r.headers["Host"] for r in tls_receiver.received} == {f"hooks.test:{tls_receiver.port}"}
    assert [a[1] for a in await attempts(pool)] == ["delivered"] * 3


async def test_plain_http_is_tunnelled_too(pool, runtime, dns, proxy, receiver) -> None:
    rt = with_settings(runtime, egress_proxy=proxy.url, dns_servers=dns.server)
    await backlog(pool, rt, receiver.url_for("hooks.test"), 2)
    async with running(dispatcher(rt, pool)):
        await wait_drained(pool)
    assert len(receiver.received) == 2
    assert set(proxy.asked) == {f"127.0.0.1:{receiver.port}"}
    assert all(r.startswith("CONNECT ") for r in proxy.requests)
    assert receiver.received[0].headers["Host"] == f"hooks.test:{receiver.port}"


async def test_the_ssrf_rules_hold_and_the_proxy_is_exempt(pool, runtime, dns, proxy) -> None:
    # Only 127.0.0.2 may be reached; the proxy, on 127.0.0.1, is exempt: ops chose it.
    inside = await Receiver(bind="127.0.0.2").start()
    try:
        rt = with_settings(
            runtime,
            egress_proxy=proxy.url,
            dns_servers=dns.server,
            allow_private_cidrs="127.0.0.2/32",
        )
        tenant, _ = await backlog(pool, rt, inside.url_for("inside.test"), 1)
        await backlog(pool, rt, f"http://hooks.test:{inside.port}/hook", 1, tenant)
        await backlog(pool, rt, f"http://127.0.0.1:{inside.port}/hook", 1, tenant)
        async with running(dispatcher(rt, pool)):
            await wait_drained(pool)
        assert len(inside.received) == 1
        assert proxy.asked == [f"127.0.0.2:{inside.port}"]
        errors = await pool.fetch("SELECT last_error FROM dead_letters")
        assert len(errors) == 2
        assert all("destination refused" in r["last_error"] for r in errors)
    finally:
        await inside.stop()


# -- whose fault ----------------------------------------------------------------------


async def test_a_proxy_that_is_down_costs_no_attempt(pool, runtime, receiver) -> None:
    port = free_port()  # nothing listens there yet
    rt = with_settings(
        runtime, egress_proxy=f"http://127.0.0.1:{port}", breaker_threshold=1, max_attempts=1
    )
    await backlog(pool, rt, receiver.url, 2)
    before = LOCAL_FAULTS.labels("egress_proxy")._value.get()
    async with running(dispatcher(rt, pool)) as d:
        await eventually(lambda: d.counters["local_faults"] >= 4, what="four local faults")
        rows = await pool.fetch("SELECT attempts, budget_used FROM outbox")
        assert [tuple(r) for r in rows] == [(0, 0), (0, 0)]
        assert await attempts(pool) == []
        # The destination's circuit (threshold 1 here) was never charged.
        assert not await pool.fetchval(
            "SELECT count(*) FROM destinations WHERE state <> 'closed' OR consecutive_failures > 0"
        )
        assert LOCAL_FAULTS.labels("egress_proxy")._value.get() - before >= 4
        # The proxy comes back: delivery resumes, each event on its first attempt.
        back = await RecordingProxy().start(port)
        try:
            await wait_drained(pool)
        finally:
            await back.stop()
    assert len(receiver.received) == 2
    assert [a[:2] for a in await attempts(pool)] == [(1, "delivered")] * 2


@pytest.mark.parametrize("answer", [403, 407])
async def test_a_proxy_that_refuses_costs_no_attempt(
    pool, runtime, receiver, proxy, answer
) -> None:
    proxy.answer = answer
    rt = with_settings(runtime, egress_proxy=proxy.url, max_attempts=1)
    await backlog(pool, rt, receiver.url, 1)
    async with running(dispatcher(rt, pool)) as d:
        await eventually(lambda: d.counters["local_faults"] >= 2, what="two local faults")
        assert await attempts(pool) == []
        proxy.answer = 200
        await wait_drained(pool)
    assert [a[:2] for a in await attempts(pool)] == [(1, "delivered")]


async def test_a_gateway_error_is_the_destinations(pool, runtime, proxy) -> None:
    # The proxy is up but could not reach the checked address (here: nothing listens
    # there): as a refused connection without a proxy, it spends the event's attempts,
    # so a receiver that is down still ends in dead letters rather than looping.
    closed = free_port()
    rt = with_settings(runtime, egress_proxy=proxy.url, max_attempts=2)
    await backlog(pool, rt, f"http://127.0.0.1:{closed}/hook", 1)
    async with running(dispatcher(rt, pool)):
        await wait_drained(pool)
    logged = await attempts(pool)
    assert [a[:2] for a in logged] == [(1, "retry"), (2, "dead")]
    assert f"egress proxy could not connect to 127.0.0.1:{closed}: 502 Bad Gateway" in (
        logged[0][2] or ""
    )


# -- tinyproxy, a real forward proxy ---------------------------------------------------


async def test_through_tinyproxy(
    pool, runtime, dns, tinyproxy, receiver, tls_receiver, tmp_path, ca
) -> None:
    rt = with_settings(
        runtime,
        egress_proxy=tinyproxy.url,
        dns_servers=dns.server,
        ca_bundle=ca_file(tmp_path, ca),
        max_attempts=2,
    )
    closed = free_port()
    tenant, _ = await backlog(pool, rt, tls_receiver.url_for("hooks.test"), 2)
    await backlog(pool, rt, receiver.url_for("hooks.test"), 2, tenant)
    await backlog(pool, rt, f"http://hooks.test:{closed}/hook", 1, tenant)
    async with running(dispatcher(rt, pool)):
        await wait_drained(pool)
    assert len(tls_receiver.received) == 2 and len(receiver.received) == 2
    assert tls_receiver.received[0].headers["Host"] == f"hooks.test:{tls_receiver.port}"
    # tinyproxy was asked for the checked address; it never saw the name.
    log = tinyproxy.logged()
    for port in (tls_receiver.port, receiver.port, closed):
        assert f"CONNECT 127.0.0.1:{port} HTTP/1.1" in log
    assert "hooks.test" not in log
    # Nothing listens on `closed`: tinyproxy answers 500 Unable to connect, the
    # destination's fault, retried and then dead, its error in the attempt log.
    [dead] = await pool.fetch("SELECT last_error FROM dead_letters")
    assert f"egress proxy could not connect to 127.0.0.1:{closed}: 500" in dead["last_error"]


async def test_a_dual_stack_host_is_tried_at_its_next_address(
    pool, runtime, dns, tinyproxy, receiver
) -> None:
    # The receiver listens on 127.0.0.1 only; dual.test resolves to ::1 first. tinyproxy
    # cannot reach [::1]:port and says so with a gateway error: the next checked
    # address is asked for within the same attempt, as a direct connection would.
    rt = with_settings(runtime, egress_proxy=tinyproxy.url, dns_servers=dns.server)
    _, events = await backlog(pool, rt, receiver.url_for("dual.test"), 1)
    async with running(dispatcher(rt, pool)):
        await wait_drained(pool)
    assert receiver.event_ids() == events
    assert await attempts(pool) == [(1, "delivered", None)]
    log = tinyproxy.logged()
    asked = [line for line in log.splitlines() if "CONNECT " in line and "HTTP/1.1" in line]
    assert [f"[::1]:{receiver.port}" in a for a in asked] == [True, False]
    assert f"CONNECT 127.0.0.1:{receiver.port} HTTP/1.1" in asked[1]
    assert "dual.test" not in log
    assert receiver.received[0].headers["Host"] == f"dual.test:{receiver.port}"


async def test_a_dual_stack_host_down_at_every_address_is_the_receivers(
    pool, runtime, dns, tinyproxy
) -> None:
    closed = free_port()
    rt = with_settings(runtime, egress_proxy=tinyproxy.url, dns_servers=dns.server, max_attempts=2)
    await backlog(pool, rt, f"http://dual.test:{closed}/hook", 1)
    async with running(dispatcher(rt, pool)):
        await wait_drained(pool)
    logged = await attempts(pool)
    assert [a[:2] for a in logged] == [(1, "retry"), (2, "dead")]
    # Each attempt asked for both addresses, once each, in the resolver's order.
    for _, _, error in logged:
        assert error is not None
        assert f"egress proxy could not connect to [::1]:{closed}: 500" in error
        assert f"127.0.0.1:{closed}: 500" in error
        assert error.index("[::1]") < error.index("127.0.0.1")
    log = tinyproxy.logged()
    assert log.count(f"[::1]:{closed}") == 2
    assert log.count(f"CONNECT 127.0.0.1:{closed} ") == 2


# -- the tunnel's edge cases -----------------------------------------------------------


async def scripted(answer: bytes, *, close: bool = True) -> tuple[asyncio.Server, int]:
    """A proxy that answers any request with ``answer`` bytes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer)
            await writer.drain()
            if not close:
                await reader.read()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (b"", "closed the connection without answering CONNECT"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP answer to CONNECT"),
        (b"HTTP/1.1 200 OK\r\n\r\nsurprise", "sent data after its answer to CONNECT"),
        (b"HTTP/1.1 200 " + b"x" * 20_000, "has no end of headers"),
        (b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n", "refused CONNECT 192.0.2.1:443"),
    ],
)
async def test_what_a_proxy_answers_wrong_is_ours(answer: bytes, expected: str) -> None:
    server, port = await scripted(answer)
    try:
        with pytest.raises(LocalFault) as caught:
            await open_tunnel(
                asyncio.get_running_loop(),
                EgressProxy("127.0.0.1", port),
                Resolver(),
                ("192.0.2.1", 443),
                [],
            )
        assert caught.value.kind == "egress_proxy" and expected in caught.value.detail
    finally:
        server.close()
        await server.wait_closed()


async def test_an_ipv6_target_is_bracketed_and_a_named_proxy_resolved() -> None:
    dns = await FakeDns(records={"proxy.test": (["127.0.0.1"], 60)}).start()
    server, port = await scripted(b"HTTP/1.0 200 Connection established\r\n\r\n", close=False)
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 504 Gateway Timeout\r\n\r\n")
        await writer.drain()
        writer.close()

    gateway = await asyncio.start_server(handle, "127.0.0.1", 0)
    resolver = Resolver(nameservers=[dns.server])
    loop = asyncio.get_running_loop()
    try:
        reached: list[bool] = []
        sock = await open_tunnel(
            loop, EgressProxy("proxy.test", port), resolver, ("2001:db8::1", 443), reached
        )
        sock.close()
        assert reached == [True]
        with pytest.raises(TunnelRefused) as caught:
            await open_tunnel(
                loop,
                EgressProxy("127.0.0.1", gateway.sockets[0].getsockname()[1]),
                resolver,
                ("2001:db8::1", 443),
                [],
            )
        assert "could not connect to [2001:db8::1]:443: 504 Gateway Timeout" in str(caught.value)
        assert seen[0].startswith(b"CONNECT [2001:db8::1]:443 HTTP/1.1\r\n")
        with pytest.raises(LocalFault, match="egress proxy http://nowhere.test:1"):
            await open_tunnel(loop, EgressProxy("nowhere.test", 1), resolver, ("192.0.2.1", 1), [])
    finally:
        for s in (server, gateway):
            s.close()
            await s.wait_closed()
        await resolver.close()
        dns.stop()


def proxied_sender(proxy_url: str, connect_timeout_s: float = 0.5) -> AiohttpSender:
    return AiohttpSender(
        AddressPolicy.from_settings("127.0.0.0/8", allow_http=True),
        concurrency=4,
        per_host=4,
        connect_timeout_s=connect_timeout_s,
        proxy=EgressProxy.from_url(proxy_url),
    )


async def test_a_proxy_that_never_accepts_is_ours(monkeypatch, receiver) -> None:
    async def hang(loop, proxy, resolver, target, reached) -> socket.socket:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    monkeypatch.setattr("hookrelay.outbox.egress.ssrf.open_tunnel", hang)
    sender = proxied_sender("http://127.0.0.1:9")
    try:
        with pytest.raises(LocalFault, match="no connection within the connect timeout"):
            await sender.post(receiver.url, b"{}", {}, 100)
    finally:
        await sender.aclose()


async def test_a_proxy_that_never_gets_through_is_the_destinations(monkeypatch, receiver) -> None:
    async def stuck(loop, proxy, resolver, target, reached) -> socket.socket:
        reached.append(True)  # the proxy took the connection, then tried for ever
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    monkeypatch.setattr("hookrelay.outbox.egress.ssrf.open_tunnel", stuck)
    sender = proxied_sender("http://127.0.0.1:9")
    try:
        with pytest.raises(TransportError):
            await sender.post(receiver.url, b"{}", {}, 100)
    finally:
        await sender.aclose()


async def test_tls_failures_inside_the_tunnel_are_the_receivers(
    pool, runtime, dns, proxy, receiver, tmp_path
) -> None:
    alone = issue("hooks.test", hosts=("hooks.test",))  # self-signed: trusted by nobody
    rx = await Receiver(tls=server_context(tmp_path, alone)).start()
    try:
        rt = with_settings(runtime, egress_proxy=proxy.url, dns_servers=dns.server, max_attempts=1)
        tenant, _ = await backlog(pool, rt, rx.url_for("hooks.test"), 1)
        # https to a receiver that speaks plain http: the TLS handshake fails.
        await backlog(pool, rt, f"https://hooks.test:{receiver.port}/hook", 1, tenant)
        async with running(dispatcher(rt, pool)):
            await wait_drained(pool)
        errors = sorted(
            r["last_error"] for r in await pool.fetch("SELECT last_error FROM dead_letters")
        )
        assert len(errors) == 2
        assert any("certificate verify failed" in e for e in errors)
        assert set(proxy.asked) == {f"127.0.0.1:{rx.port}", f"127.0.0.1:{receiver.port}"}
    finally:
        await rx.stop()


async def test_a_proxy_that_resets_during_connect_is_ours() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # an RST, not a FIN

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        with pytest.raises(LocalFault) as caught:
            await open_tunnel(
                asyncio.get_running_loop(),
                EgressProxy("127.0.0.1", server.sockets[0].getsockname()[1]),
                Resolver(),
                ("192.0.2.1", 443),
                [],
            )
        assert caught.value.kind == "egress_proxy"
        assert "connection lost during CONNECT" in caught.value.detail
    finally:
        server.close()
        await server.wait_closed()
