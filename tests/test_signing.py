"""Standard Webhooks signatures; every expected value is recomputed here with hmac.

Verifying them is hookrelay.receiver's (tests/test_receiver.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import pytest

from hookrelay.outbox.errors import ConfigurationError
from hookrelay.outbox.keys.signing import (
    SECRET_PREFIX,
    Signer,
    generate_secret,
    secret_key,
    sign,
    signature_header,
    webhook_headers,
)

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OTHER = "whsec_" + base64.b64encode(b"o" * 32).decode()
MSG_ID = "evt_01HZX"
NOW = 1_700_000_000
BODY = b'{"type":"task.succeeded","timestamp":"2023-11-14T22:13:20Z","data":{"id":"task_1"}}'


def reference(secret: str, msg_id: str, ts: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, msg_id.encode() + b"." + str(ts).encode() + b"." + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def signed(secrets: list[str] | None = None, ts: int = NOW) -> dict[str, str]:
    return webhook_headers(secrets or [SECRET], MSG_ID, ts, BODY)


# --- signing -----------------------------------------------------------------


def test_public_standard_webhooks_vector() -> None:
    got = sign(SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')
    assert got == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_sign_matches_independent_hmac() -> None:
    assert sign(SECRET, MSG_ID, NOW, BODY) == reference(SECRET, MSG_ID, NOW, BODY)
    assert sign(OTHER, MSG_ID, NOW, b"") == reference(OTHER, MSG_ID, NOW, b"")


def test_headers_are_exactly_the_standard_four() -> None:
    h = Signer([SECRET]).headers(MSG_ID, NOW, BODY)
    assert h == {
        "content-type": "application/json",
        "webhook-id": MSG_ID,
        "webhook-timestamp": str(NOW),
        "webhook-signature": reference(SECRET, MSG_ID, NOW, BODY),
    }
    assert signed() == h


def test_signature_header_keeps_the_given_order() -> None:
    value = signature_header([OTHER, SECRET], MSG_ID, NOW, BODY)
    assert value == reference(OTHER, MSG_ID, NOW, BODY) + " " + reference(SECRET, MSG_ID, NOW, BODY)


def test_signer_is_reusable() -> None:
    signer = Signer([SECRET])
    for ts in (NOW, NOW + 1, NOW + 2):
        assert signer.headers(MSG_ID, ts, BODY)["webhook-signature"] == reference(
            SECRET, MSG_ID, ts, BODY
        )


def test_generated_secret_shape() -> None:
    s = generate_secret()
    assert s.startswith(SECRET_PREFIX) and len(base64.b64decode(s[6:], validate=True)) == 32
    assert s != generate_secret()


def test_secret_key_decodes_and_strips_prefix() -> None:
    assert secret_key(OTHER) == b"o" * 32
    assert secret_key(OTHER.removeprefix("whsec_")) == b"o" * 32


@pytest.mark.parametrize("bad", ["whsec_not*base64", "whsec_abc", "whsec_", ""])
def test_bad_secret_is_configuration_error(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        secret_key(bad)
    with pytest.raises(ConfigurationError):
        Signer([bad])


def test_signer_needs_a_list_of_secrets() -> None:
    with pytest.raises(ConfigurationError):
        Signer([])
    with pytest.raises(TypeError):
        Signer(SECRET)


def test_repr_hides_keys() -> None:
    assert "MfKQ9r8" not in repr(Signer([SECRET]))


# --- interoperability -----------------------------------------------------------


def test_reference_standard_webhooks_library_accepts_us() -> None:
    standardwebhooks = pytest.importorskip("standardwebhooks")
    new = generate_secret()
    ts = int(time.time())
    for secrets in ([SECRET], [new, SECRET]):
        h = webhook_headers(secrets, MSG_ID, ts, BODY)
        for secret in secrets:
            standardwebhooks.Webhook(secret).verify(BODY, h)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(OTHER).verify(BODY, webhook_headers([SECRET], MSG_ID, ts, BODY))
