"""SSRF guard: blocked ranges, URL syntax, resolution, and the aiohttp stack.

No database and no network: names resolve from /etc/hosts or as numeric literals,
and the only traffic goes to a server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator

import aiohttp
import httpx
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from hookrelay.outbox.egress.dns import Resolved, Resolver
from hookrelay.outbox.egress.ssrf import (
    BLOCKED_NETWORKS,
    AddressPolicy,
    GuardedConnector,
    GuardedResolver,
    ParsedTarget,
    blocked_reason,
    guard_target,
    resolve_checked,
)
from hookrelay.outbox.errors import BlockedDestination, ConfigurationError, LookupFailed

pytestmark = pytest.mark.anyio

ALLOW_LOOPBACK = "127.0.0.0/8,::1/128"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


BLOCKED = [
    ("0.0.0.0/8", "0.0.0.0"),
    ("10.0.0.0/8", "10.0.0.1"),
    ("100.64.0.0/10", "100.64.0.1"),
    ("127.0.0.0/8", "127.0.0.1"),
    ("169.254.0.0/16", "169.254.169.254"),
    ("172.16.0.0/12", "172.31.255.255"),
    ("192.0.0.0/24", "192.0.0.8"),
    ("192.0.2.0/24", "192.0.2.1"),
    ("192.88.99.0/24", "192.88.99.1"),
    ("192.168.0.0/16", "192.168.1.1"),
    ("198.18.0.0/15", "198.19.0.1"),
    ("198.51.100.0/24", "198.51.100.7"),
    ("203.0.113.0/24", "203.0.113.9"),
    ("224.0.0.0/4", "224.0.0.251"),
    ("240.0.0.0/4", "255.255.255.255"),
    ("::/128", "::"),
    ("::1/128", "::1"),
    ("fe80::/10", "fe80::1"),
    ("fc00::/7", "fc00::1"),
    ("fec0::/10", "fec0::1"),
    ("ff00::/8", "ff02::1"),
    ("2001:db8::/32", "2001:db8::1"),
    # IPv4 embedded in IPv6: the reason names the unwrapped address's range.
    ("127.0.0.0/8", "::ffff:127.0.0.1"),
    ("10.0.0.0/8", "::ffff:10.0.0.1"),
    ("127.0.0.0/8", "64:ff9b::7f00:1"),
    ("127.0.0.0/8", "2002:7f00:1::"),
    ("127.0.0.0/8", "2001:0:4136:e378:8000:63bf:80ff:fffe"),  # Teredo client 127.0.0.1
    ("10.0.0.0/8", "2001:0:a00:1:8000:63bf:f7f7:f7f7"),  # Teredo server 10.0.0.1
    ("127.0.0.0/8", "::127.0.0.1"),  # IPv4-compatible
]
BLOCKED_IDS = [
    "0/8", "10/8", "100.64/10", "127/8", "169.254/16", "172.16/12", "192.0.0/24",
    "192.0.2/24", "192.88.99/24", "192.168/16", "198.18/15", "198.51.100/24",
    "203.0.113/24", "224/4", "240/4", "v6-unspecified", "v6-loopback", "fe80/10",
    "fc00/7", "fec0/10", "ff00/8", "2001:db8/32", "mapped-loopback", "mapped-private",
    "nat64", "6to4", "teredo-client", "teredo-server", "v4-compatible",
]  # fmt: skip


def test_blocked_networks_are_exactly_the_design_list() -> None:
    assert len(BLOCKED_NETWORKS) == 22
    assert {str(n) for n in BLOCKED_NETWORKS} == {r for r, _ in BLOCKED[:22]}


@pytest.mark.parametrize(("network", "address"), BLOCKED, ids=BLOCKED_IDS)
def test_blocked_address(network: str, address: str) -> None:
    reason = AddressPolicy().ip_block_reason(address)
    assert reason is not None and network in reason
    assert AddressPolicy().ip_block_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::",
        "2001:0:4136:e378:8000:63bf:f7f7:f7f7",  # Teredo, public server and client
        "172.32.0.1",
        "100.128.0.1",
    ],
)
def test_public_address_allowed(address: str) -> None:
    assert AddressPolicy().ip_block_reason(address) is None


def test_unparseable_address_is_blocked() -> None:
    assert AddressPolicy().ip_block_reason("not-an-ip") is not None


def test_allowlist_exempts_only_its_range() -> None:
    policy = AddressPolicy.from_settings("127.0.0.0/8", allow_http=False)
    assert policy.ip_block_reason("127.0.0.1") is None
    assert policy.ip_block_reason("10.0.0.1") == (
        "address 10.0.0.1 is in blocked range 10.0.0.0/8 (private)"
    )


@pytest.mark.parametrize(
    "address",
    ["169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254", "169.254.170.2",
     "100.100.100.200", "64:ff9b::a9fe:a9fe"],
)  # fmt: skip
def test_a_metadata_address_is_never_offered_for_exemption(address: str) -> None:
    blocked = AddressPolicy().ip_block(address)
    assert blocked is not None and blocked.allow is None


def test_its_neighbours_are_offered_alone() -> None:
    blocked = AddressPolicy().ip_block("169.254.169.253")
    assert blocked is not None and blocked.allow == "169.254.169.253/32"
    assert (
        blocked.reason == "address 169.254.169.253 is in blocked range 169.254.0.0/16 (link-local)"
    )


def test_wrapped_address_needs_ipv4_or_raw_allowance() -> None:
    v6_only = AddressPolicy.from_settings("::1/128", allow_http=False)
    assert v6_only.ip_block_reason("::1") is None
    assert v6_only.ip_block_reason("::ffff:127.0.0.1") is not None
    with pytest.raises(BlockedDestination):
        v6_only.check_url("https://[::ffff:127.0.0.1]/")
    both = AddressPolicy.from_settings(ALLOW_LOOPBACK, allow_http=False)
    assert both.ip_block_reason("::ffff:127.0.0.1") is None
    assert both.check_url("https://[::ffff:127.0.0.1]/").port == 443
    raw = AddressPolicy.from_settings("::ffff:0:0/96", allow_http=False)
    assert raw.ip_block_reason("::ffff:10.0.0.1") is None
    assert raw.ip_block_reason("10.0.0.1") is not None


def test_from_settings_parses_and_skips_blanks() -> None:
    policy = AddressPolicy.from_settings(" 10.0.0.0/8, ,::1/128,, ", allow_http=True)
    assert policy.allowed == (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1"))
    assert policy.allow_http
    assert AddressPolicy.from_settings("", allow_http=False) == AddressPolicy()


@pytest.mark.parametrize("value", ["10.0.0.0/33", "nonsense", "10.0.0.1/8", "10.0.0.0/8;"])
def test_from_settings_rejects_bad_cidr(value: str) -> None:
    with pytest.raises(ConfigurationError, match="HOOKRELAY_ALLOW_PRIVATE_CIDRS"):
        AddressPolicy.from_settings(f"127.0.0.0/8,{value}", allow_http=False)


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [
        ("https://Example.COM/path?q=1", "example.com", 443),
        ("https://example.com:8443/", "example.com", 8443),
        ("https://example.com:/", "example.com", 443),
        ("https://example.com./hook", "example.com.", 443),
        ("https://bücher.example/", "xn--bcher-kva.example", 443),
        ("https://8.8.8.8/", "8.8.8.8", 443),
        ("https://[2606:4700:4700::1111]:444/", "2606:4700:4700::1111", 444),
        ("https://a.b-c.example/x?y=%20", "a.b-c.example", 443),
    ],
)
def test_check_url_accepts(url: str, host: str, port: int) -> None:
    target = AddressPolicy().check_url(url)
    assert target == ParsedTarget("https", host, port, url)


def test_check_url_http_only_when_allowed() -> None:
    with pytest.raises(ValueError, match="http"):
        AddressPolicy().check_url("http://example.com/")
    target = AddressPolicy(allow_http=True).check_url("HTTP://example.com/")
    assert (target.scheme, target.port) == ("http", 80)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "example.com/hook",
        "/hook",
        "javascript:alert(1)",
        "https://user:pw@example.com/",
        "https://user@example.com/",
        "https://",
        "https:///path",
        "https:example.com",
        "https://:443/",
        "https://example.com:0/",
        "https://example.com:70000/",
        "https://example.com:abc/",
        "https://example.com:+80/",
        "https://example.com:80:80/",
        "https://example.com/" + "a" * 2048,
        "https://example.com/#frag",
        "https://example.com/#",
        "https://exa mple.com/",
        "https://example.com/a b",
        " https://example.com/",
        "https://example.com/\n",
        "https://example.com/\x00",
        "https://exam\tple.com/",
        "https://example.com\u2028/",
        "https://example.com\\@evil.example/",
        "http://[::1",
        "https://[::1]x/",
        "https://[v1.fe]/",
        "https://[1.2.3.4]/",
        "https://[fe80::1%25eth0]/",
        "https://-bad.example/",
        "https://a..b/",
        "https://exa_mple.com/",
        "https://" + "a" * 64 + ".example/",
        "https://134744072/",  # non-canonical spelling of 8.8.8.8
    ],
)
def test_check_url_rejects(url: str) -> None:
    with pytest.raises(ValueError):
        AddressPolicy(allow_http=True).check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/",
        "https://0.0.0.0:8080/",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/",
        "https://[::ffff:127.0.0.1]/",
        "https://[fe80::1]/",
        "https://2130706433/",
        "https://0x7f000001/",
        "https://0177.0.0.1/",
        "https://127.1/",
    ],
)
def test_check_url_blocks_literals(url: str) -> None:
    with pytest.raises(BlockedDestination):
        AddressPolicy().check_url(url)


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "127.1",
        "localhost",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "0.0.0.0",
        "10.1.2.3",
        "169.254.169.254",
    ],
)
async def test_resolve_checked_refuses(host: str) -> None:
    with pytest.raises(BlockedDestination):
        await resolve_checked(host, 443, AddressPolicy(), Resolver())


async def test_resolve_checked_returns_addresses() -> None:
    assert await resolve_checked("8.8.8.8", 443, AddressPolicy(), Resolver()) == ["8.8.8.8"]
    allowed = AddressPolicy.from_settings(ALLOW_LOOPBACK, allow_http=True)
    assert "127.0.0.1" in await resolve_checked("localhost", 80, allowed, Resolver())
    assert await resolve_checked("[::1]", 80, allowed, Resolver()) == ["::1"]


class StubResolver(Resolver):
    """Answers every name with ``addresses`` (none: no such name); records the names asked."""

    def __init__(self, *addresses: str) -> None:
        super().__init__()
        self.addresses = addresses
        self.asked: list[str] = []

    async def resolve(self, host: str) -> list[Resolved]:
        self.asked.append(host)
        if not self.addresses:
            raise LookupFailed(host, "Domain name not found")
        return [Resolved(socket.AF_INET, a) for a in self.addresses]


async def test_resolve_checked_mixed_answer_refused() -> None:
    with pytest.raises(BlockedDestination, match="10.0.0.7"):
        await resolve_checked(
            "rebind.example", 443, AddressPolicy(), StubResolver("93.184.215.14", "10.0.0.7")
        )


async def test_resolve_failure_propagates() -> None:
    with pytest.raises(LookupFailed):
        await resolve_checked("nowhere.example", 443, AddressPolicy(), StubResolver())


async def test_guard_target() -> None:
    resolver = StubResolver("10.9.9.9")
    with pytest.raises(BlockedDestination, match="10.9.9.9"):
        await guard_target("https://internal.example/hook", AddressPolicy(), resolver)
    with pytest.raises(ValueError):
        await guard_target("https://user@internal.example/hook", AddressPolicy(), resolver)


async def test_guard_target_does_not_resolve_ip_literals() -> None:
    resolver = StubResolver("93.184.215.14")
    target = await guard_target("https://93.184.215.14/hook", AddressPolicy(), resolver)
    assert target.host == "93.184.215.14" and resolver.asked == []


class StaticResolver(AbstractResolver):
    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses
        self.closed = False

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(hostname=host, host=a, port=port, family=socket.AF_INET, proto=6, flags=0)
            for a in self.addresses
        ]

    async def close(self) -> None:
        self.closed = True


async def test_guarded_resolver() -> None:
    inner = StaticResolver("93.184.215.14", "169.254.169.254")
    resolver = GuardedResolver(AddressPolicy(), inner)
    with pytest.raises(BlockedDestination, match="169.254.169.254"):
        await resolver.resolve("metadata.example", 443)
    inner.addresses = ("93.184.215.14",)
    assert [r["host"] for r in await resolver.resolve("ok.example", 443)] == ["93.184.215.14"]
    await resolver.close()
    assert inner.closed


def test_blocked_reason_walks_chain() -> None:
    try:
        try:
            raise BlockedDestination("nope")
        except BlockedDestination as inner:
            raise httpx.ConnectError("wrapped") from inner
    except httpx.ConnectError as outer:
        caught = outer
    assert blocked_reason(caught) == "nope"
    group = ExceptionGroup("g", [ValueError("x"), caught])
    assert blocked_reason(group) == "nope"
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert blocked_reason(a) is None


@pytest.fixture
async def server() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A tiny HTTP server on 127.0.0.1 answering 204; yields (port, requests seen)."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
             if line.lower().startswith(b"content-length:")),
            0,
        )  # fmt: skip
        await reader.readexactly(length)
        seen.append(head)
        writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with srv:
        yield srv.sockets[0].getsockname()[1], seen


async def _post(connector: aiohttp.BaseConnector, url: str) -> int:
    async with (
        aiohttp.ClientSession(connector=connector, trust_env=False) as session,
        session.post(url, data=b'{"ok":true}') as response,
    ):
        return response.status


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_stack_blocks_loopback(server: tuple[int, list[bytes]], host: str) -> None:
    port, seen = server
    with pytest.raises(Exception) as info:  # noqa: B017 - the type is aiohttp's business
        await _post(GuardedConnector(AddressPolicy()), f"http://{host}:{port}/")
    assert blocked_reason(info.value) is not None, repr(info.value)
    assert seen == []


async def test_stack_resolver_alone_blocks_names(server: tuple[int, list[bytes]]) -> None:
    port, seen = server
    connector = aiohttp.TCPConnector(resolver=GuardedResolver(AddressPolicy()))
    with pytest.raises(Exception) as info:  # noqa: B017
        await _post(connector, f"http://localhost:{port}/")
    assert blocked_reason(info.value) is not None
    assert seen == []


async def test_plain_connector_skips_resolver_for_ip_literals(
    server: tuple[int, list[bytes]],
) -> None:
    # Why GuardedConnector exists: aiohttp never asks the resolver about IP literals.
    port, seen = server
    connector = aiohttp.TCPConnector(resolver=GuardedResolver(AddressPolicy()))
    assert await _post(connector, f"http://127.0.0.1:{port}/") == 204
    assert len(seen) == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_stack_allowlisted_loopback_delivers(
    server: tuple[int, list[bytes]], host: str
) -> None:
    port, seen = server
    policy = AddressPolicy.from_settings(ALLOW_LOOPBACK, True)
    url = policy.check_url(f"http://{host}:{port}/").url
    assert await _post(GuardedConnector(policy), url) == 204
    assert len(seen) == 1 and seen[0].startswith(b"POST / HTTP/1.1")
