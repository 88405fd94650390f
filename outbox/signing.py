"""Standard Webhooks v1 signatures (https://www.standardwebhooks.com).

``webhook-signature`` is ``v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>``,
one per active secret, space separated; the key is the base64 part of ``whsec_...``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping, Sequence

from .errors import ConfigurationError

SECRET_PREFIX = "whsec_"


class SignatureError(ValueError):
    """A webhook failed verification; the message says why."""


def generate_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key inside a ``whsec_`` secret."""
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigurationError("signing secret is not valid base64") from exc


def _mac(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


class Signer:
    """Signs with every given secret; keys are decoded once, not per attempt."""

    def __init__(self, secrets_: Sequence[str]) -> None:
        self._keys = [secret_key(s) for s in secrets_]

    def signature(self, msg_id: str, timestamp: int, body: bytes) -> str:
        return " ".join(_mac(k, msg_id, timestamp, body) for k in self._keys)

    def headers(self, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        return {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": self.signature(msg_id, timestamp, body),
        }


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    return _mac(secret_key(secret), msg_id, timestamp, body)


def webhook_headers(
    secrets_: Sequence[str], msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    return Signer(secrets_).headers(msg_id, timestamp, body)


def verify(
    secrets_: Sequence[str], headers: Mapping[str, str], body: bytes, *,
    tolerance_s: int = 300, now: float | None = None,
) -> None:
    """Receiver-side check; raises :class:`SignatureError` unless a signature matches."""
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        msg_id, ts_raw, sigs = (lower[h] for h in
                                ("webhook-id", "webhook-timestamp", "webhook-signature"))
    except KeyError as exc:
        raise SignatureError(f"missing header {exc.args[0]}") from None
    try:
        ts = int(ts_raw)
    except ValueError:
        raise SignatureError("webhook-timestamp is not an integer") from None
    if abs((time.time() if now is None else now) - ts) > tolerance_s:
        raise SignatureError("webhook-timestamp outside the tolerance")
    expected = [_mac(secret_key(s), msg_id, ts, body).encode() for s in secrets_]
    for candidate in sigs.split():
        if any(hmac.compare_digest(candidate.encode(), e) for e in expected):
            return
    raise SignatureError("no matching signature")
