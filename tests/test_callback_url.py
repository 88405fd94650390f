"""Refused callback URLs name the rule that refused them, never a setting (the operator's
log names the setting, never for a metadata address); DNS failures say DNS is checked now."""

from __future__ import annotations

import logging
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


def ops_log(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "hookrelay.api")


@pytest.fixture(autouse=True)
def _info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hookrelay.api")


async def test_plain_http_names_the_rule_and_the_log_the_setting(caplog) -> None:
    err = await refusal("http://127.0.0.1:9000/hooks")
    assert err.code == "invalid_callback_url"
    assert err.message == "callbackUrl is invalid: plain http URLs are not allowed; use https"
    assert "HOOKRELAY_ALLOW_HTTP=true would allow it" in ops_log(caplog)


@pytest.mark.parametrize(
    ("url", "rule", "allow"),
    [
        ("https://127.0.0.1:9000/hooks", "in blocked range 127.0.0.0/8 (loopback)", "127.0.0.1/32"),
        ("https://[::1]/hooks", "in blocked range ::1/128 (loopback)", "::1/128"),
        ("https://[::ffff:10.1.2.3]/", "embeds 10.1.2.3, which is in blocked range 10.0.0.0/8",
         "10.1.2.3/32"),
        ("https://100.64.0.1/", "in blocked range 100.64.0.0/10 (shared (carrier-grade NAT))",
         "100.64.0.1/32"),
    ],
)  # fmt: skip
async def test_a_blocked_address_names_the_rule_and_the_log_the_setting(
    url: str, rule: str, allow: str, caplog
) -> None:
    err = await refusal(url)
    assert err.code == "blocked_callback_url"
    assert rule in err.message
    assert err.message.endswith("; private and reserved address ranges are refused")
    assert "HOOKRELAY_" not in err.message  # the tenant is never told of a setting
    # The operator's log is, and that CIDR really is what lets it through.
    assert f"HOOKRELAY_ALLOW_PRIVATE_CIDRS={allow} would allow it" in ops_log(caplog)
    policy = AddressPolicy.from_settings(allow, allow_http=False)
    assert await check_callback_url(url, policy, NEVER_ASKED) == url


@pytest.mark.parametrize(
    ("url", "resolver", "rule"),
    [
        ("https://169.254.169.254/latest/meta-data/", NEVER_ASKED, "169.254.0.0/16 (link-local)"),
        ("https://[fd00:ec2::254]/", NEVER_ASKED, "fc00::/7 (unique local (private))"),
        ("https://[::ffff:169.254.169.254]/", NEVER_ASKED, "169.254.0.0/16 (link-local)"),
        ("https://169.254.170.2/v2/credentials", NEVER_ASKED, "169.254.0.0/16 (link-local)"),
        ("https://100.100.100.200/latest", NEVER_ASKED, "100.64.0.0/10 (shared"),
        ("https://metadata.example/", FixedResolver("169.254.169.254"),
         "169.254.0.0/16 (link-local)"),
    ],
)  # fmt: skip
async def test_a_metadata_address_is_never_suggested_for_exemption(
    url: str, resolver: Resolver, rule: str, caplog
) -> None:
    err = await refusal(url, resolver=resolver)
    assert err.code == "blocked_callback_url" and rule in err.message
    assert "HOOKRELAY_" not in err.message
    assert "HOOKRELAY_" not in ops_log(caplog)


async def test_a_name_resolving_to_a_blocked_address_names_it(caplog) -> None:
    err = await refusal("https://receiver.example:443/", resolver=FixedResolver("127.0.0.2"))
    assert "receiver.example: address 127.0.0.2 is in blocked range 127.0.0.0/8" in err.message
    assert "HOOKRELAY_" not in err.message
    assert "HOOKRELAY_ALLOW_PRIVATE_CIDRS=127.0.0.2/32" in ops_log(caplog)


async def test_unresolvable_host_says_dns_is_checked_at_submit() -> None:
    err = await refusal("https://nowhere-at-all.example/hooks")
    assert err.code == "invalid_callback_url"
    assert "'nowhere-at-all.example' cannot be resolved (no such name)" in err.message
    assert "checks DNS when the task is submitted" in err.message
    assert "HOOKRELAY_" not in err.message


async def test_the_api_answers_the_rule(client, tenant) -> None:
    r = await client.post(
        "/v1/tasks",
        json={"type": "t", "callbackUrl": "http://10.0.0.7/hooks"},
        headers=bearer(tenant["apiKey"]),
    )
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["code"] == "blocked_callback_url"
    assert error["message"] == (
        "callbackUrl refused: address 10.0.0.7 is in blocked range 10.0.0.0/8 (private);"
        " private and reserved address ranges are refused"
    )
