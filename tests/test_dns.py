"""The resolver: a deadline per lookup, one slow name never holds another, TTLs honoured."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from hookrelay.outbox.egress.dns import AiohttpResolver, Resolver
from hookrelay.outbox.egress.http import AiohttpSender
from hookrelay.outbox.egress.ssrf import AddressPolicy
from hookrelay.outbox.errors import BlockedDestination, LocalFault, LookupFailed
from tests.fakedns import FakeDns
from tests.receiver import Receiver

pytestmark = pytest.mark.anyio

LOOPBACK = AddressPolicy.from_settings("127.0.0.0/8,::1/128", allow_http=True)


@pytest.fixture
async def dns() -> AsyncIterator[FakeDns]:
    server = await FakeDns(
        records={"ok.test": (["127.0.0.1"], 60), "short.test": (["127.0.0.1"], 1)},
        silent={f"hang{i}.test" for i in range(16)},
    ).start()
    yield server
    server.stop()


async def test_names_that_never_answer_fail_alone(dns: FakeDns) -> None:
    resolver = Resolver(timeout_s=1.0, nameservers=[dns.server])
    try:
        hanging = [asyncio.create_task(resolver.resolve(f"hang{i}.test")) for i in range(16)]
        await asyncio.sleep(0.05)  # the sixteen queries are out
        found = await resolver.resolve("ok.test")
        assert [r.address for r in found] == ["127.0.0.1"]
        assert not any(t.done() for t in hanging)  # answered while they still wait
        for outcome in await asyncio.gather(*hanging, return_exceptions=True):
            assert isinstance(outcome, LookupFailed) and "no DNS answer within 1s" in str(outcome)
        assert all(dns.asked[f"hang{i}.test"] for i in range(16))
    finally:
        await resolver.close()


async def test_answers_are_cached_for_their_ttl(dns: FakeDns) -> None:
    resolver = Resolver(timeout_s=1.0, nameservers=[dns.server])
    try:
        await resolver.resolve("ok.test")
        await resolver.resolve("short.test")
        asked = dns.asked.copy()
        await resolver.resolve("ok.test")
        await resolver.resolve("short.test")
        assert dns.asked == asked  # both still fresh
        await asyncio.sleep(1.2)  # past short.test's one-second TTL
        await resolver.resolve("ok.test")
        await resolver.resolve("short.test")
        assert dns.asked["ok.test"] == asked["ok.test"]
        assert dns.asked["short.test"] > asked["short.test"]
    finally:
        await resolver.close()


async def test_concurrent_lookups_of_one_name_share_a_query(dns: FakeDns) -> None:
    resolver = Resolver(timeout_s=1.0, nameservers=[dns.server])
    try:
        await asyncio.gather(*(resolver.resolve("ok.test") for _ in range(20)))
        assert dns.asked["ok.test"] <= 2  # one A and one AAAA query
    finally:
        await resolver.close()


async def test_unknown_name_is_the_destinations_problem(dns: FakeDns) -> None:
    resolver = Resolver(timeout_s=1.0, nameservers=[dns.server])
    try:
        with pytest.raises(LookupFailed, match="not found"):
            await resolver.resolve("nowhere.test")
    finally:
        await resolver.close()


async def test_unreachable_nameserver_is_a_local_fault() -> None:
    # A port with nothing behind it: the kernel answers "connection refused".
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    resolver = Resolver(timeout_s=1.0, nameservers=[f"127.0.0.1:{port}"])
    try:
        with pytest.raises((LocalFault, LookupFailed)) as info:
            await resolver.resolve("ok.test")
        assert isinstance(info.value, LocalFault), info.value
        assert info.value.kind == "resolver_unavailable"
    finally:
        await resolver.close()


async def test_every_resolved_address_is_checked_at_connect(dns: FakeDns) -> None:
    receiver = await Receiver().start()
    url = f"http://ok.test:{receiver.port}/hook"
    allowed = AiohttpSender(
        LOOPBACK,
        concurrency=2,
        per_host=2,
        connect_timeout_s=1.0,
        resolver=Resolver(timeout_s=1.0, nameservers=[dns.server]),
    )
    refused = AiohttpSender(
        AddressPolicy(allow_http=True),
        concurrency=2,
        per_host=2,
        connect_timeout_s=1.0,
        resolver=Resolver(timeout_s=1.0, nameservers=[dns.server]),
    )
    try:
        assert (await allowed.post(url, b"{}", {}, 100)).status == 204
        with pytest.raises(BlockedDestination, match="127.0.0.1"):
            await refused.post(url, b"{}", {}, 100)
        assert len(receiver.received) == 1
    finally:
        await allowed.aclose()
        await refused.aclose()
        await receiver.stop()


async def test_a_silent_name_fails_the_attempt(dns: FakeDns) -> None:
    sender = AiohttpSender(
        LOOPBACK,
        concurrency=2,
        per_host=2,
        connect_timeout_s=1.0,
        resolver=Resolver(timeout_s=0.5, nameservers=[dns.server]),
    )
    try:
        with pytest.raises(LookupFailed, match="no DNS answer"):
            await sender.post("http://hang0.test:9/hook", b"{}", {}, 100)
    finally:
        await sender.aclose()


async def test_a_full_cache_is_emptied_rather_than_grown(dns: FakeDns) -> None:
    resolver = Resolver(timeout_s=1.0, nameservers=[dns.server], max_entries=1)
    try:
        await resolver.resolve("ok.test")
        await resolver.resolve("short.test")  # the cache is full: ok.test goes
        assert list(resolver._cache) == ["short.test"]
    finally:
        await resolver.close()


async def test_close_cancels_lookups_in_progress(dns: FakeDns) -> None:
    resolver = Resolver(timeout_s=5.0, nameservers=[dns.server])
    waiting = asyncio.create_task(resolver.resolve("hang0.test"))
    await asyncio.sleep(0.05)  # the query is out
    await resolver.close()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_aiohttp_resolver_keeps_only_the_family_asked_for(dns: FakeDns) -> None:
    resolver = AiohttpResolver(Resolver(timeout_s=1.0, nameservers=[dns.server]))
    try:
        [found] = await resolver.resolve("ok.test", 8443, socket.AF_INET)
        assert (found["host"], found["port"], found["hostname"]) == ("127.0.0.1", 8443, "ok.test")
        with pytest.raises(LookupFailed, match="no AF_INET6 address"):
            await resolver.resolve("ok.test", 8443, socket.AF_INET6)
    finally:
        await resolver.close()
    assert resolver.resolver._channel is None
