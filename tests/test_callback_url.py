"""Refused callback URLs say which setting would allow them; DNS failures say DNS is checked now."""

from __future__ import annotations

import socket

import pytest

from hookrelay.outbox.egress.dns import Resolved, Resolver
from hookrelay.outbox.egress.ssrf import AddressPolicy
from hookrelay.outbox.errors import LookupFailed
from hookrelay.service.api.callback_url import check_callback_url
from hookrelay.service.api.errors import Unprocessable
from tests.support import bearer

pytestmark = pytest.mark.anyio

STRICT = AddressPolicy.from_settings("", allow_http=False)


class FixedResolver(Resolver):
    """Answers every name with ``address``, or fails the lookup when it is None."""

    def __init__(self, address: str | None) -> None:
        super().__init__()
        self.address = address

    async def resolve(self, host: str) -> list[Resolved]:
        if self.address is None:
            raise LookupFailed(host, "no such name")
        return [Resolved(socket.AF_INET, self.address)]


NEVER_ASKED = FixedResolver(None)  # IP-literal hosts are judged without a lookup


async def refusal(
    url: str, policy: AddressPolicy = STRICT, resolver: Resolver = NEVER_ASKED
) -> Unprocessable:
    with pytest.raises(Unprocessable) as caught:
        await check_callback_url(url, policy, resolver)
    return caught.value


async def test_plain_http_names_allow_http() -> None:
    err = await refusal("http://127.0.0.1:9000/hooks")
    assert err.code == "invalid_callback_url" and "HOOKRELAY_ALLOW_HTTP=true" in err.message


@pytest.mark.parametrize(
    ("url", "allow"),
    [
        ("https://127.0.0.1:9000/hooks", "127.0.0.1/32"),
        ("https://[::1]/hooks", "::1/128"),
        ("https://[::ffff:10.1.2.3]/", "10.1.2.3/32"),
    ],
)
async def test_blocked_address_names_the_cidr_to_allow(url: str, allow: str) -> None:
    err = await refusal(url)
    assert err.code == "blocked_callback_url"
    assert f"HOOKRELAY_ALLOW_PRIVATE_CIDRS={allow}" in err.message
    # ...and that CIDR really is what lets it through.
    policy = AddressPolicy.from_settings(allow, allow_http=False)
    assert await check_callback_url(url, policy, NEVER_ASKED) == url


async def test_a_name_resolving_to_a_blocked_address_names_the_cidr() -> None:
    err = await refusal("https://receiver.example:443/", resolver=FixedResolver("127.0.0.2"))
    assert "receiver.example: address 127.0.0.2" in err.message
    assert "HOOKRELAY_ALLOW_PRIVATE_CIDRS=127.0.0.2/32" in err.message


async def test_unresolvable_host_says_dns_is_checked_at_submit() -> None:
    err = await refusal("https://nowhere-at-all.example/hooks")
    assert err.code == "invalid_callback_url"
    assert "'nowhere-at-all.example' cannot be resolved (no such name)" in err.message
    assert "checks DNS when the task is submitted" in err.message


async def test_the_api_answers_the_hint(client, tenant) -> None:
    r = await client.post(
        "/v1/tasks",
        json={"type": "t", "callbackUrl": "http://10.0.0.7/hooks"},
        headers=bearer(tenant["apiKey"]),
    )
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["code"] == "blocked_callback_url"
    assert "HOOKRELAY_ALLOW_PRIVATE_CIDRS=10.0.0.7/32" in error["message"]
