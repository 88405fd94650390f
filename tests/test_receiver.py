"""``hookrelay.receiver.verify`` against webhooks signed by hookrelay's own signer and by
the standardwebhooks and svix libraries, v1 and v1a, rotations, and every refusal."""

from __future__ import annotations

import base64
import hmac
import json
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import nacl.signing
import pytest
import standardwebhooks
import svix.webhooks

from hookrelay.outbox.keys import ed25519
from hookrelay.outbox.keys.signing import Signer, generate_secret
from hookrelay.receiver import (
    BadSignature,
    InvalidPayload,
    MissingHeader,
    StaleTimestamp,
    Verifier,
    signatures,
    verify,
)
from tests.clientfakes import task_json

TASK = {k: v for k, v in task_json("succeeded", 2, result={"url": "u"}).items() if k != "delivery"}
BODY = json.dumps({"type": "task.succeeded", "timestamp": "2026-01-01T00:00:02Z", "data": TASK})


def signed(secrets=(), keys=(), body: str = BODY, msg_id: str = "evt_1", ts: int | None = None):
    """Headers of ``body`` as hookrelay's dispatcher signs it."""
    ts = int(time.time()) if ts is None else ts
    return Signer(list(secrets), list(keys)).headers(msg_id, ts, body.encode())


def test_a_hookrelay_webhook_verifies_and_parses() -> None:
    secret = generate_secret()
    event = verify(signed([secret]), BODY.encode(), secrets=[secret])
    assert (event.id, event.type) == ("evt_1", "task.succeeded")
    assert event.timestamp == datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC)
    task = event.task
    assert task is not None and (task.id, task.status, task.result) == (
        "task_a",
        "succeeded",
        {"url": "u"},
    )
    assert task.delivery is None  # a webhook's data has no delivery block


def test_signatures_of_the_reference_libraries_verify() -> None:
    secret = generate_secret()
    now = datetime.now(UTC)
    for library in (standardwebhooks.Webhook(secret), svix.webhooks.Webhook(secret)):
        header = library.sign("evt_9", now, BODY)
        headers = {
            "webhook-id": "evt_9",
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": header,
        }
        assert verify(headers, BODY, secrets=secret).id == "evt_9", type(library)


def test_v1a_verifies_with_a_public_key_from_either_implementation() -> None:
    pair = ed25519.generate_keypair()
    assert verify(signed(keys=[pair.private_key]), BODY, public_keys=[pair.public_key]).id
    # The same scheme from libsodium: the signature over "{id}.{timestamp}.{body}".
    key = nacl.signing.SigningKey.generate()
    ts = int(time.time())
    sig = key.sign(f"evt_2.{ts}.{BODY}".encode()).signature
    headers = {
        "webhook-id": "evt_2",
        "webhook-timestamp": str(ts),
        "webhook-signature": "v1a," + base64.b64encode(sig).decode(),
    }
    public = "whpk_" + base64.b64encode(bytes(key.verify_key)).decode()
    assert verify(headers, BODY, public_keys=public).id == "evt_2"


def test_rotations_any_key_matching_is_enough() -> None:
    old, new = generate_secret(), generate_secret()
    pair = ed25519.generate_keypair()
    headers = signed([new, old], [pair.private_key])
    assert headers["webhook-signature"].count(" ") == 2  # three signatures
    for secrets, keys in (([old], []), ([new], []), ([], [pair.public_key])):
        assert verify(headers, BODY, secrets=secrets, public_keys=keys).id == "evt_1"
    # Versions we have no key for, and malformed entries, sit beside ours unharmed.
    headers["webhook-signature"] = "v2,abc v1,!!! " + headers["webhook-signature"]
    assert verify(headers, BODY, secrets=[generate_secret(), new]).id == "evt_1"


def test_header_names_in_any_case_and_a_str_body() -> None:
    secret = generate_secret()
    headers = {k.title(): v for k, v in signed([secret]).items()}
    assert verify(headers, BODY, secrets=[secret]).id == "evt_1"


@pytest.mark.parametrize("header", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_header_is_named(header) -> None:
    secret = generate_secret()
    headers = signed([secret])
    headers[header] = ""
    with pytest.raises(MissingHeader) as missing:
        verify(headers, BODY, secrets=[secret])
    assert missing.value.header == header and header in str(missing.value)


@pytest.mark.parametrize("offset", [-301, 301])
def test_a_timestamp_outside_the_tolerance_is_stale(offset) -> None:
    secret = generate_secret()
    now = time.time()
    headers = signed([secret], ts=int(now) + offset)
    with pytest.raises(StaleTimestamp):
        verify(headers, BODY, secrets=[secret], now=now)
    assert verify(headers, BODY, secrets=[secret], now=now, tolerance=400).id == "evt_1"
    headers["webhook-timestamp"] = "12e3"
    with pytest.raises(StaleTimestamp, match="integer"):
        verify(headers, BODY, secrets=[secret])


def test_a_changed_body_a_wrong_key_or_a_scheme_without_keys_is_refused() -> None:
    secret, pair = generate_secret(), ed25519.generate_keypair()
    headers = signed([secret], [pair.private_key])
    with pytest.raises(BadSignature):
        verify(headers, BODY.replace("succeeded", "failed"), secrets=[secret])
    with pytest.raises(BadSignature):
        verify(headers, BODY, secrets=[generate_secret()])
    with pytest.raises(BadSignature):
        verify(headers, BODY, public_keys=[ed25519.generate_keypair().public_key])
    only_v1a = signed(keys=[pair.private_key])
    with pytest.raises(BadSignature):
        verify(only_v1a, BODY, secrets=[secret])  # a v1a signature, and only secrets given


@pytest.mark.parametrize("change", ["id", "timestamp", "body"])
@pytest.mark.parametrize("scheme", ["v1", "v1a"])
def test_any_signed_part_changed_is_refused(scheme, change) -> None:
    secret, pair = generate_secret(), ed25519.generate_keypair()
    ts = int(time.time())
    headers, body = signed([secret], [pair.private_key], ts=ts), BODY
    if change == "id":
        headers["webhook-id"] = "evt_other"
    elif change == "timestamp":
        headers["webhook-timestamp"] = str(ts + 1)
    else:
        body = BODY.replace("task_a", "task_b")
    keys: dict[str, Any] = (
        {"secrets": [secret]} if scheme == "v1" else {"public_keys": [pair.public_key]}
    )
    with pytest.raises(BadSignature):
        verify(headers, body, **keys)
    assert verify(signed([secret], [pair.private_key], ts=ts), BODY, **keys).id == "evt_1"


def test_the_tolerance_includes_its_bounds() -> None:
    secret, now = generate_secret(), 1_700_000_000
    for offset in (-300, 300):
        assert verify(signed([secret], ts=now + offset), BODY, secrets=[secret], now=now).id


@pytest.mark.parametrize(
    "value", ["v1", "v1,@@not-base64@@", "v2,AAAA", "v1a,AAAA"], ids=lambda v: v.split(",")[0]
)
def test_a_header_with_no_usable_signature_is_refused(value) -> None:
    secret = generate_secret()
    headers = signed([secret])
    bare = headers["webhook-signature"].removeprefix("v1,")  # no version: not a signature
    for given in (value, bare):
        with pytest.raises(BadSignature):
            verify({**headers, "webhook-signature": given}, BODY, secrets=[secret])


def test_in_a_rotation_each_signature_verifies_with_its_own_secret_only() -> None:
    old, new = generate_secret(), generate_secret()
    headers = signed([new, old])
    first, second = headers["webhook-signature"].split(" ")
    assert verify({**headers, "webhook-signature": first}, BODY, secrets=[new]).id
    assert verify({**headers, "webhook-signature": second}, BODY, secrets=[old]).id
    with pytest.raises(BadSignature):
        verify({**headers, "webhook-signature": first}, BODY, secrets=[old])


def test_a_signed_body_that_is_no_event_is_refused() -> None:
    secret = generate_secret()
    for body in ("not json", '{"type": "task.succeeded"}', "[1]"):
        with pytest.raises(InvalidPayload):
            verify(signed([secret], body=body), body, secrets=[secret])


def test_every_hmac_pair_is_compared_in_constant_time(monkeypatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(signatures, "hmac", SimpleNamespace(new=hmac.new, compare_digest=counting))
    first, second = generate_secret(), generate_secret()
    headers = signed([first, generate_secret(), generate_secret()])
    verify(headers, BODY, secrets=[first, second])
    assert len(calls) == 2 * 3  # no early exit at the first match


def test_keys_are_checked_up_front_and_never_shown() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Verifier()
    with pytest.raises(ValueError, match="not valid base64") as bad:
        Verifier(secrets=["whsec_not base64!"])
    assert "not base64!" not in str(bad.value)
    for key in ("whpk_", "whpk_!!", "whpk_" + base64.b64encode(b"x").decode()):
        with pytest.raises(ValueError, match="public key"):
            Verifier(public_keys=[key])
    secret = generate_secret()
    assert secret.removeprefix("whsec_") not in repr(Verifier(secrets=secret))
    # The bare base64 key (without whsec_) is accepted too, as the libraries accept it.
    assert Verifier(secrets=secret.removeprefix("whsec_"))(signed([secret]), BODY).id
