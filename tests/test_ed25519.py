"""v1a (Ed25519) signatures, checked with libsodium through PyNaCl: an implementation
independent of the ``cryptography`` package that signs them."""

from __future__ import annotations

import base64
from pathlib import Path

import nacl.exceptions
import nacl.signing
import pytest

from hookrelay.outbox.errors import ConfigurationError
from hookrelay.outbox.keys.ed25519 import (
    generate_keypair,
    load_private_key,
    public_key_of,
    signature,
)
from hookrelay.outbox.keys.signing import Signer
from hookrelay.receiver import BadSignature, InvalidPayload, verify

DOC = Path(__file__).resolve().parent.parent / "docs" / "guides" / "signatures-v1a.md"

# RFC 8032 section 7.1, TEST 1: the key pair and the signature of the empty message.
RFC_SEED = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
RFC_PUBLIC = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
RFC_EMPTY_SIG = (
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e"
    "39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)
# The Standard Webhooks reference message and v1 secret (the reference libraries'
# own test vector), signed here with the RFC key: docs/guides/signatures-v1a.md.
MSG_ID, TS, BODY = "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}'
V1_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
V1_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
WHSK = "whsk_" + base64.b64encode(bytes.fromhex(RFC_SEED)).decode()
WHPK = "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="
V1A_SIG = (
    "v1a,fldxM4gAKugP6nnt1hdz3sgGfZ6d99nzrMFnZOELIxbzEHoVmAb2ADpkJK7zgPePmPsle0zV9jSeGlHFG2NVAw=="
)


def nacl_verify(whpk: str, msg_id: str, timestamp: int, body: bytes, header_entry: str) -> None:
    """Verify one ``v1a,...`` entry from scratch with libsodium; raises if it does not match."""
    version, _, encoded = header_entry.partition(",")
    assert version == "v1a"
    key = nacl.signing.VerifyKey(base64.b64decode(whpk.removeprefix("whpk_")))
    key.verify(f"{msg_id}.{timestamp}.".encode() + body, base64.b64decode(encoded))


def test_rfc8032_test_1_key_and_signature() -> None:
    key = load_private_key(WHSK)
    assert public_key_of(key) == "whpk_" + base64.b64encode(bytes.fromhex(RFC_PUBLIC)).decode()
    assert key.sign(b"").hex() == RFC_EMPTY_SIG


def test_standard_webhooks_vector_matches_libsodium_and_the_docs() -> None:
    assert public_key_of(load_private_key(WHSK)) == WHPK
    header = Signer([V1_SECRET], [WHSK]).signature(MSG_ID, TS, BODY)
    assert header == f"{V1_SIG} {V1A_SIG}"
    # libsodium signs the same bytes to the same signature (Ed25519 is deterministic).
    signed = f"{MSG_ID}.{TS}.".encode() + BODY
    ours = nacl.signing.SigningKey(bytes.fromhex(RFC_SEED)).sign(signed).signature
    assert "v1a," + base64.b64encode(ours).decode() == V1A_SIG
    nacl_verify(WHPK, MSG_ID, TS, BODY, V1A_SIG)
    published = DOC.read_text()
    for value in (MSG_ID, str(TS), BODY.decode(), WHSK, WHPK, V1_SECRET, V1_SIG, V1A_SIG):
        assert value in published, f"{value} is not in {DOC.name}"


def test_generated_pair_verifies_with_libsodium() -> None:
    pair = generate_keypair()
    assert pair.private_key.startswith("whsk_") and pair.public_key.startswith("whpk_")
    seed = base64.b64decode(pair.private_key.removeprefix("whsk_"))
    assert len(seed) == 32
    # The public key libsodium derives from the seed is the one we hand out.
    derived = nacl.signing.SigningKey(seed).verify_key.encode()
    assert pair.public_key == "whpk_" + base64.b64encode(derived).decode()
    sig = signature(load_private_key(pair.private_key), "evt_1", 1_700_000_000, b"{}")
    nacl_verify(pair.public_key, "evt_1", 1_700_000_000, b"{}", sig)
    assert "whsk_" not in repr(pair)


# One failure mode each, every one recomputed by libsodium: the signature made over
# the real message must not verify for the altered one.
@pytest.mark.parametrize(
    ("msg_id", "timestamp", "body"),
    [
        ("evt_2", 1_700_000_000, b'{"a":1}'),  # another webhook-id
        ("evt_1", 1_700_000_001, b'{"a":1}'),  # another webhook-timestamp
        ("evt_1", 1_700_000_000, b'{"a":2}'),  # a body changed by one byte
        ("evt_1", 1_700_000_000, b'{"a":1} '),  # a body with a byte appended
    ],
    ids=["id", "timestamp", "body-changed", "body-appended"],
)
def test_altered_message_fails(msg_id: str, timestamp: int, body: bytes) -> None:
    pair = generate_keypair()
    sig = signature(load_private_key(pair.private_key), "evt_1", 1_700_000_000, b'{"a":1}')
    nacl_verify(pair.public_key, "evt_1", 1_700_000_000, b'{"a":1}', sig)
    with pytest.raises(nacl.exceptions.BadSignatureError):
        nacl_verify(pair.public_key, msg_id, timestamp, body, sig)


def test_other_public_key_fails() -> None:
    pair, other = generate_keypair(), generate_keypair()
    sig = signature(load_private_key(pair.private_key), "evt_1", 1, b"{}")
    with pytest.raises(nacl.exceptions.BadSignatureError):
        nacl_verify(other.public_key, "evt_1", 1, b"{}", sig)


def test_flipped_signature_bit_fails() -> None:
    pair = generate_keypair()
    raw = bytearray(
        base64.b64decode(signature(load_private_key(pair.private_key), "e", 1, b"{}")[4:])
    )
    raw[10] ^= 0x01
    with pytest.raises(nacl.exceptions.BadSignatureError):
        nacl_verify(pair.public_key, "e", 1, b"{}", "v1a," + base64.b64encode(raw).decode())


def test_both_schemes_and_rotation_in_one_header() -> None:
    new, old = generate_keypair(), generate_keypair()
    header = Signer([V1_SECRET], [new.private_key, old.private_key]).signature("e", 5, b"{}")
    v1, v1a_new, v1a_old = header.split(" ")
    assert v1.startswith("v1,")
    nacl_verify(new.public_key, "e", 5, b"{}", v1a_new)
    nacl_verify(old.public_key, "e", 5, b"{}", v1a_old)
    only_v1a = Signer([], [new.private_key]).signature("e", 5, b"{}")
    assert only_v1a == v1a_new


@pytest.mark.parametrize(
    "bad",
    ["whsec_" + "A" * 44, "whsk_not base64!", "whsk_" + base64.b64encode(b"short").decode()],
    ids=["prefix", "base64", "length"],
)
def test_malformed_private_key_is_refused_without_echo(bad: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        load_private_key(bad)
    assert bad.split("_", 1)[1] not in str(info.value)


def test_signer_needs_some_key() -> None:
    with pytest.raises(ConfigurationError):
        Signer([], [])
    with pytest.raises(TypeError):
        Signer([], WHSK)  # a str is a Sequence[str] too: refused at run time


def test_the_published_vector_matches_with_the_receivers_verifier() -> None:
    """Both signatures of the vector match in hookrelay.receiver, which then refuses the
    body only because the reference libraries' message is no webhook event."""
    vector = {"webhook-id": MSG_ID, "webhook-timestamp": str(TS)}
    vector["webhook-signature"] = f"{V1_SIG} {V1A_SIG}"
    with pytest.raises(InvalidPayload):
        verify(vector, BODY, public_keys=[WHPK], now=TS)
    with pytest.raises(InvalidPayload):
        verify(vector, BODY, secrets=[V1_SECRET], now=TS)
    with pytest.raises(BadSignature):
        verify(vector, BODY, public_keys=[generate_keypair().public_key], now=TS)
