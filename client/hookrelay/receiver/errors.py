"""Why a webhook was refused. Each is a ``ValueError``; answer it with a 400.

The tree::

    VerificationError
    ├── MissingHeader     webhook-id, webhook-timestamp or webhook-signature absent or empty
    ├── StaleTimestamp    webhook-timestamp outside the tolerance (a replay, or a bad clock)
    ├── BadSignature      no signature matches a secret or public key given
    └── InvalidPayload    signed, but the body is not a JSON event

Messages never hold a secret.
"""

from __future__ import annotations

__all__ = [
    "BadSignature",
    "InvalidPayload",
    "MissingHeader",
    "StaleTimestamp",
    "VerificationError",
]


class VerificationError(ValueError):
    """The webhook did not pass the checks: answer 400, do not process it."""


class MissingHeader(VerificationError):
    def __init__(self, header: str) -> None:
        super().__init__(f"missing {header} header")
        self.header = header


class StaleTimestamp(VerificationError):
    """Older or newer than the tolerance allows; each attempt is signed afresh."""


class BadSignature(VerificationError):
    """No signature of a known version matches: wrong secret, or a changed body."""


class InvalidPayload(VerificationError):
    """The signature matches but the body is not ``{"type", "timestamp", "data"}``."""
