"""How ``hookrelay listen`` judges a webhook's signature: with the library's own verifier."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from outbox import signing
from outbox.errors import SignatureError


@dataclass(frozen=True)
class Verdict:
    checked: bool
    ok: bool
    text: str


@dataclass(frozen=True)
class Verifier:
    """Verifies with a ``whsec_`` secret, or (no secret) only says it did not check."""

    secret: str | None

    @property
    def banner(self) -> str:
        if self.secret is None:
            return "Signatures are not checked: pass --secret whsec_... to verify them."
        return "Signatures are verified with the given secret."

    def __call__(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        if self.secret is None:
            return Verdict(False, False, "signature not checked (no --secret given)")
        try:
            signing.verify([self.secret], headers, body)
        except SignatureError as exc:
            return Verdict(True, False, f"signature NOT verified: {exc}")
        return Verdict(True, True, "signature verified (v1)")


def verifier_from_args(args: argparse.Namespace) -> Verifier:
    """The verifier the options ask for; ConfigurationError for a malformed secret."""
    if args.secret is not None:
        signing.secret_key(args.secret)  # fail at start, not on the first webhook
    return Verifier(args.secret)
