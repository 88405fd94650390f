"""Standard Webhooks v1 signatures (https://www.standardwebhooks.com).

A secret is ``whsec_`` + base64 of the key bytes. The signature of a message is
``v1,`` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")); during a secret
rotation the header carries one signature per active secret, space-separated,
and a receiver accepts the message if any of them matches.

A tenant may also (or instead) sign with Ed25519 keys, the specification's
asymmetric ``v1a`` scheme (:mod:`hookrelay.outbox.keys.ed25519`); a :class:`Signer` then puts
those signatures in the same header, after the ``v1`` ones.

This is the signing side only. Verifying is the receiver's: :mod:`hookrelay.receiver`
(which ``hookrelay listen`` uses too).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets as _secrets
from collections.abc import Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hookrelay.outbox.errors import ConfigurationError
from hookrelay.outbox.keys import ed25519

SECRET_PREFIX = "whsec_"
SIGNATURE_VERSION = "v1"
_SECRET_BYTES = 32


def generate_secret() -> str:
    """A fresh ``whsec_`` signing secret holding 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(_SECRET_BYTES)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key inside a ``whsec_`` secret; ConfigurationError if it is not base64."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        # Never echo the secret itself: this message may end up in a log.
        raise ConfigurationError("signing secret is not valid base64 after 'whsec_'") from None
    if not key:
        raise ConfigurationError("signing secret is empty")
    return key


class Signer:
    """Signs messages with fixed lists of ``whsec_`` secrets and ``whsk_`` keys, newest first.

    Keys are decoded and HMAC states keyed once here; each signature then only
    copies a prepared state, which matters because every attempt is signed.
    """

    __slots__ = ("_keys", "_macs")

    def __init__(self, secrets: Sequence[str], private_keys: Sequence[str] = ()) -> None:
        # A bare str is a Sequence[str] too; iterating it would sign per character.
        if isinstance(secrets, str) or isinstance(private_keys, str):
            raise TypeError("Signer takes sequences of secrets and keys, not a single string")
        if not secrets and not private_keys:
            raise ConfigurationError("at least one signing secret or key is required")
        self._macs = tuple(hmac.new(secret_key(s), digestmod=hashlib.sha256) for s in secrets)
        self._keys: tuple[Ed25519PrivateKey, ...] = tuple(
            ed25519.load_private_key(k) for k in private_keys
        )

    def __repr__(self) -> str:
        return f"Signer(<{len(self._macs)} secret(s), {len(self._keys)} key(s)>)"

    def digests(self, msg_id: str, timestamp: int, body: bytes) -> list[bytes]:
        """Raw HMAC-SHA256 digests of the message, one per secret, in order."""
        prefix = b"%s.%d." % (msg_id.encode(), timestamp)
        out = []
        for base in self._macs:
            # A copy of the keyed state, not a new HMAC: measured 1.2 µs against
            # 1.5 µs for hmac.digest(key, prefix + body).
            mac = base.copy()
            mac.update(prefix)
            mac.update(body)  # two updates: no copy of a large body
            out.append(mac.digest())
        return out

    def signature(self, msg_id: str, timestamp: int, body: bytes) -> str:
        """The ``webhook-signature`` header value: ``v1,<b64>`` per secret, then
        ``v1a,<b64>`` per Ed25519 key, space-separated."""
        v1 = [
            "v1," + binascii.b2a_base64(d, newline=False).decode("ascii")
            for d in self.digests(msg_id, timestamp, body)
        ]
        if not self._keys:
            return v1[0] if len(v1) == 1 else " ".join(v1)
        return " ".join([*v1, *(ed25519.signature(k, msg_id, timestamp, body) for k in self._keys)])

    def headers(self, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        """The four headers of a signed Standard Webhooks POST."""
        return {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": self.signature(msg_id, timestamp, body),
        }


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` of one message under one secret."""
    return Signer([secret]).signature(msg_id, timestamp, body)


def signature_header(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value for all ``secrets``, in the order given."""
    return Signer(secrets).signature(msg_id, timestamp, body)


def webhook_headers(
    secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The headers of a signed webhook; prefer a long-lived ``Signer`` on hot paths."""
    return Signer(secrets).headers(msg_id, timestamp, body)
