"""Every row of the prefix table, refused at submit (the API) and at connect (the aiohttp stack)."""

from __future__ import annotations

import ipaddress

import aiohttp
import pytest

from hookrelay.outbox.destinations import PREFIXES, classify, embedded_ipv4
from hookrelay.outbox.egress.ssrf import AddressPolicy, GuardedConnector, blocked_reason
from tests.support import bearer
from tests.test_ssrf import StaticResolver

pytestmark = pytest.mark.anyio

# One address per row, each aimed at the metadata service 169.254.169.254 (a9fe:a9fe)
# where the row embeds IPv4, so the tests' loopback allowance cannot exempt it.
ROWS = {
    "::ffff:0:0/96": "::ffff:a9fe:a9fe",
    "::ffff:0:0:0/96": "::ffff:0:a9fe:a9fe",
    "64:ff9b::/96": "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::/48": "64:ff9b:1::a9fe:a9fe",
    "2002::/16": "2002:a9fe:a9fe::1",
    "2001::/32": "2001:0:a9fe:a9fe::1",
    "::/96": "::a9fe:a9fe",
    "100::/64": "100::1",
    "2001:10::/28": "2001:10::1",
    "2001:20::/28": "2001:20::1",
}
# Other spellings the issue or RFC 6052 layouts allow.
EXTRA = [
    "::ffff:0:a00:1",  # SIIT 10.0.0.1
    "64:ff9b:1:a9fe:a9:fe00::",  # local-use NAT64, /48 layout
    "64:ff9b:1:ff:a9fe:a9fe::",  # /64 layout
    "2001:0:4136:e378:8000:63bf:5601:5601",  # Teredo client 169.254.169.254 (inverted)
]
ALL = list(ROWS.values()) + EXTRA


def test_table_has_a_tested_address_per_row() -> None:
    assert {str(p.network) for p in PREFIXES} == set(ROWS)
    for cidr, address in ROWS.items():
        row = classify(ipaddress.IPv6Address(address))
        assert row is not None and str(row.network) == cidr


@pytest.mark.parametrize("address", ALL)
def test_policy_refuses(address: str) -> None:
    reason = AddressPolicy.from_settings("127.0.0.0/8,::1/128", True).ip_block_reason(address)
    assert reason is not None, address


def test_issue_spellings_refused_by_default() -> None:
    for address in ("64:ff9b:1::a9fe:a9fe", "::ffff:0:a9fe:a9fe", "::ffff:0:7f00:1"):
        assert AddressPolicy().ip_block_reason(address) is not None


def test_unwrapping_rules() -> None:
    v4 = ipaddress.IPv4Address("169.254.169.254")
    for cidr, address in ROWS.items():
        row = classify(ipaddress.IPv6Address(address))
        assert row is not None
        inner = embedded_ipv4(ipaddress.IPv6Address(address), row)
        assert (v4 in inner) == (row.rule != "refuse"), cidr


@pytest.mark.parametrize("address", ["::ffff:808:808", "64:ff9b::808:808", "2002:808:808::"])
def test_public_inside_prefix_allowed(address: str) -> None:
    assert AddressPolicy().ip_block_reason(address) is None


@pytest.mark.parametrize("address", ALL)
async def test_refused_at_submit(client, tenant, address: str) -> None:
    r = await client.post(
        "/v1/tasks",
        json={"type": "t", "callbackUrl": f"http://[{address}]/hook"},
        headers=bearer(tenant["apiKey"]),
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "blocked_callback_url"


async def _dial(connector: aiohttp.BaseConnector, url: str) -> BaseException:
    with pytest.raises(Exception) as info:  # noqa: B017 - the type is aiohttp's business
        async with (
            aiohttp.ClientSession(connector=connector, trust_env=False) as session,
            session.post(url, data=b"{}"),
        ):
            pass
    return info.value


@pytest.mark.parametrize("address", ALL)
async def test_refused_at_connect_as_literal(address: str) -> None:
    policy = AddressPolicy.from_settings("127.0.0.0/8,::1/128", True)
    exc = await _dial(GuardedConnector(policy), f"http://[{address}]:9/")
    assert blocked_reason(exc) is not None, repr(exc)


@pytest.mark.parametrize("address", ALL)
async def test_refused_at_connect_by_name(address: str) -> None:
    policy = AddressPolicy.from_settings("127.0.0.0/8,::1/128", True)
    connector = GuardedConnector(policy, resolver=StaticResolver(address))
    exc = await _dial(connector, "http://rebound.example:9/")
    assert blocked_reason(exc) is not None, repr(exc)
