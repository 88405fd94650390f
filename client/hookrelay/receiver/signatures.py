"""Standard Webhooks signatures, checked: ``v1`` (HMAC-SHA256 with a ``whsec_`` secret)
and ``v1a`` (Ed25519 with a ``whpk_`` public key).

The signed content is ``{webhook-id}.{webhook-timestamp}.{raw body}``. The
``webhook-signature`` header holds one or more space-separated ``version,base64``
entries (one per key during a rotation); any match of a key given is enough. HMACs
are compared in constant time, every pair, so timing does not tell which matched.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from hookrelay.models import Task
from hookrelay.receiver.errors import BadSignature, InvalidPayload, MissingHeader, StaleTimestamp
from hookrelay.receiver.tracecontext import TraceContext, trace_context

DEFAULT_TOLERANCE_S = 300.0
HMAC, ED25519 = "v1", "v1a"


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """A verified webhook. ``id`` (the ``webhook-id``) is the same on every retry,
    replay and redelivery: deduplicate by it."""

    id: str
    type: str
    timestamp: datetime  # when the event was committed (the body's own time)
    data: Any  # the task for task.* events (no delivery block); {} for a ping
    # The attempt's traceparent/tracestate, to continue the submitter's trace; None
    # when absent or malformed (hookrelay.receiver.tracecontext).
    trace: TraceContext | None = None

    @property
    def task(self) -> Task | None:
        """``data`` as a :class:`~hookrelay.models.Task`, for ``task.*`` events."""
        return Task.from_json(self.data) if self.type.startswith("task.") else None


def _decode(raw: str, prefix: str, what: str) -> bytes:
    try:
        key = base64.b64decode(raw.removeprefix(prefix), validate=True)
    except (binascii.Error, ValueError):
        # Never echo the key itself: this message may end up in a log.
        raise ValueError(f"{what} is not valid base64 after {prefix!r}") from None
    if not key:
        raise ValueError(f"{what} is empty")
    return key


def _many(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def header(headers: Mapping[str, str], name: str) -> str | None:
    """``name``'s value whatever the case of the mapping's keys."""
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value


class Verifier:
    """Checks webhooks against fixed secrets and public keys (decoded once, here)."""

    __slots__ = ("_keys", "_secrets", "tolerance")

    def __init__(
        self,
        secrets: str | Sequence[str] = (),
        public_keys: str | Sequence[str] = (),
        tolerance: float = DEFAULT_TOLERANCE_S,
    ) -> None:
        self._secrets = tuple(_decode(s, "whsec_", "a secret") for s in _many(secrets))
        self._keys = tuple(
            Ed25519PublicKey.from_public_bytes(_decode(k, "whpk_", "a public key"))
            for k in _many(public_keys)
        )
        if not self._secrets and not self._keys:
            raise ValueError("give at least one whsec_ secret or whpk_ public key")
        self.tolerance = tolerance

    def __repr__(self) -> str:
        return f"Verifier(<{len(self._secrets)} secret(s), {len(self._keys)} public key(s)>)"

    def __call__(
        self, headers: Mapping[str, str], body: bytes | str, *, now: float | None = None
    ) -> WebhookEvent:
        """The event, or the :class:`VerificationError` that says why not."""
        raw = body.encode() if isinstance(body, str) else bytes(body)
        found = {}
        for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
            value = header(headers, name)
            if not value:
                raise MissingHeader(name)
            found[name] = value.strip()
        msg_id, stamp = found["webhook-id"], found["webhook-timestamp"]
        if not stamp.isascii() or not stamp.isdigit():
            raise StaleTimestamp("webhook-timestamp is not an integer number of seconds")
        current = time.time() if now is None else now
        if abs(current - int(stamp)) > self.tolerance:
            raise StaleTimestamp(f"webhook-timestamp is more than {self.tolerance:g} s off")
        signed = f"{msg_id}.{stamp}.".encode() + raw
        if not self._matches(signed, found["webhook-signature"]):
            raise BadSignature("no signature matches")
        return _event(msg_id, raw, trace_context(headers))

    def _matches(self, signed: bytes, header_value: str) -> bool:
        given: dict[str, list[bytes]] = {HMAC: [], ED25519: []}
        for entry in header_value.split():
            version, comma, encoded = entry.partition(",")
            if comma and version in given:  # other versions may sit beside ours
                try:
                    given[version].append(base64.b64decode(encoded, validate=True))
                except (binascii.Error, ValueError):
                    continue
        matched = False
        for key in self._secrets:
            want = hmac.new(key, signed, hashlib.sha256).digest()
            for got in given[HMAC]:
                matched |= hmac.compare_digest(want, got)
        # A public key is no secret: stopping at the first match tells nothing.
        for public in self._keys if not matched else ():
            for sig in given[ED25519]:
                try:
                    public.verify(sig, signed)
                    return True
                except InvalidSignature:
                    continue
        return matched


def _event(msg_id: str, raw: bytes, trace: TraceContext | None = None) -> WebhookEvent:
    try:
        body = json.loads(raw)
        return WebhookEvent(
            msg_id,
            str(body["type"]),
            datetime.fromisoformat(body["timestamp"]),
            body["data"],
            trace,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidPayload(f"the body is not a webhook event: {exc}") from None


def verify(
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    secrets: str | Sequence[str] = (),
    public_keys: str | Sequence[str] = (),
    tolerance: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> WebhookEvent:
    """Check one webhook: the raw ``body`` before any parsing, and its headers.

    Accepted if any ``v1`` signature matches one of ``secrets`` (``whsec_...``) or any
    ``v1a`` one of ``public_keys`` (``whpk_...``), and ``webhook-timestamp`` is within
    ``tolerance`` seconds of ``now``. Build a :class:`Verifier` once on a hot path.
    """
    return Verifier(secrets, public_keys, tolerance)(headers, body, now=now)
