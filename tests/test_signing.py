"""Standard Webhooks signatures, recomputed independently with hmac in every test."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import pytest

from outbox.errors import ConfigurationError
from outbox.signing import SignatureError, Signer, generate_secret, sign, verify

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BODY = b'{"type":"task.succeeded","data":{}}'


def reference(secret: str, msg_id: str, ts: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, msg_id.encode() + b"." + str(ts).encode() + b"." + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def test_public_standard_webhooks_vector() -> None:
    got = sign(SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')
    assert got == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_headers_match_independent_hmac() -> None:
    ts = int(time.time())
    h = Signer([SECRET]).headers("evt_1", ts, BODY)
    assert set(h) == {"content-type", "webhook-id", "webhook-timestamp", "webhook-signature"}
    assert h["content-type"] == "application/json" and h["webhook-id"] == "evt_1"
    assert h["webhook-timestamp"] == str(ts)
    assert h["webhook-signature"] == reference(SECRET, "evt_1", ts, BODY)


def test_rotation_gives_one_valid_signature_per_secret() -> None:
    new = generate_secret()
    ts = int(time.time())
    h = Signer([new, SECRET]).headers("evt_2", ts, BODY)
    first, second = h["webhook-signature"].split(" ")
    assert first == reference(new, "evt_2", ts, BODY)
    assert second == reference(SECRET, "evt_2", ts, BODY)
    verify([SECRET], h, BODY)
    verify([new], h, BODY)


def test_generated_secret_shape() -> None:
    s = generate_secret()
    assert s.startswith("whsec_") and len(base64.b64decode(s[6:])) == 32


def test_bad_secret_is_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        Signer(["whsec_not*base64"])


def good_headers(ts: int | None = None) -> dict[str, str]:
    return Signer([SECRET]).headers("evt_3", ts or int(time.time()), BODY)


def test_verify_accepts_good() -> None:
    verify([SECRET], good_headers(), BODY)


def test_wrong_secret() -> None:
    with pytest.raises(SignatureError, match="no matching"):
        verify([generate_secret()], good_headers(), BODY)


def test_tampered_body() -> None:
    with pytest.raises(SignatureError):
        verify([SECRET], good_headers(), BODY + b" ")


def test_tampered_id() -> None:
    h = {**good_headers(), "webhook-id": "evt_other"}
    with pytest.raises(SignatureError):
        verify([SECRET], h, BODY)


def test_tampered_timestamp() -> None:
    h = good_headers()
    h["webhook-timestamp"] = str(int(h["webhook-timestamp"]) + 1)
    with pytest.raises(SignatureError):
        verify([SECRET], h, BODY)


def test_stale_timestamp() -> None:
    with pytest.raises(SignatureError, match="tolerance"):
        verify([SECRET], good_headers(int(time.time()) - 3600), BODY)


def test_future_timestamp() -> None:
    with pytest.raises(SignatureError, match="tolerance"):
        verify([SECRET], good_headers(int(time.time()) + 3600), BODY)


def test_missing_header() -> None:
    h = good_headers()
    del h["webhook-signature"]
    with pytest.raises(SignatureError, match="missing"):
        verify([SECRET], h, BODY)


def test_malformed_signature() -> None:
    h = good_headers()
    h["webhook-signature"] = h["webhook-signature"].removeprefix("v1,")
    with pytest.raises(SignatureError):
        verify([SECRET], h, BODY)
    h["webhook-signature"] = "v1,@@@"
    with pytest.raises(SignatureError):
        verify([SECRET], h, BODY)
