"""Standard Webhooks ``v1a`` signatures: Ed25519 over ``{id}.{timestamp}.{body}``.

A tenant's key pair is serialised as the specification names them: the private
key ``whsk_`` + base64 of its 32-byte seed (kept encrypted at rest, never shown),
the public key ``whpk_`` + base64 of its 32 raw bytes (handed to receivers). The
signature is ``v1a,`` + base64 of the 64-byte Ed25519 signature. Receivers verify it
with :mod:`hookrelay.receiver`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from hookrelay.outbox.errors import ConfigurationError

PRIVATE_PREFIX = "whsk_"
PUBLIC_PREFIX = "whpk_"
SIGNATURE_VERSION = "v1a"
KEY_BYTES = 32


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A fresh signing key: the private half to encrypt and store, the public half to show."""

    private_key: str
    public_key: str

    def __repr__(self) -> str:
        return f"KeyPair(private_key=***, public_key={self.public_key!r})"


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def generate_keypair() -> KeyPair:
    """A new Ed25519 key pair as ``whsk_``/``whpk_`` strings."""
    key = Ed25519PrivateKey.generate()
    return KeyPair(PRIVATE_PREFIX + _b64(key.private_bytes_raw()), public_key_of(key))


def public_key_of(key: Ed25519PrivateKey) -> str:
    """The ``whpk_`` form of ``key``'s public half."""
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return PUBLIC_PREFIX + _b64(raw)


def load_private_key(serialised: str) -> Ed25519PrivateKey:
    """The key inside a ``whsk_`` string; ConfigurationError if it is malformed."""
    if not serialised.startswith(PRIVATE_PREFIX):
        raise ConfigurationError("signing key does not start with 'whsk_'")
    try:
        seed = base64.b64decode(serialised.removeprefix(PRIVATE_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        # Never echo the key: this message may end up in a log.
        raise ConfigurationError("signing key is not valid base64 after 'whsk_'") from None
    if len(seed) != KEY_BYTES:
        raise ConfigurationError(f"signing key must hold {KEY_BYTES} bytes")
    return Ed25519PrivateKey.from_private_bytes(seed)


def signature(key: Ed25519PrivateKey, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1a,<base64 Ed25519 signature>`` of one message."""
    # Ed25519 hashes the message twice internally, so it needs it whole, not streamed.
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return f"{SIGNATURE_VERSION},{_b64(key.sign(signed))}"
