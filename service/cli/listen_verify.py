"""How ``hookrelay listen`` judges a webhook's signature: with the receivers' own verifier.

``--secret whsec_...`` checks ``v1`` (HMAC) signatures, ``--public-key whpk_...``
``v1a`` (Ed25519) ones; each may be given more than once, for the old and the new
key while a rotation overlaps. With both, either scheme verifying is enough. The
checks are :mod:`hookrelay.receiver`'s, so ``listen`` accepts exactly what a receiver
built on it accepts.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from hookrelay import receiver


@dataclass(frozen=True)
class Verdict:
    checked: bool
    ok: bool
    text: str


class Verifier:
    """Verifies with ``whsec_`` secrets and ``whpk_`` public keys, or (none given) only
    says it did not check. ValueError at once for a malformed secret or key."""

    def __init__(self, secrets: tuple[str, ...] = (), public_keys: tuple[str, ...] = ()) -> None:
        for key in public_keys:
            if not key.startswith("whpk_"):
                raise ValueError("public key does not start with 'whpk_'")
        self.secrets, self.public_keys = secrets, public_keys
        # One receiver verifier per scheme given, to say which one verified.
        given = (("v1", secrets, ()), ("v1a", (), public_keys))
        self._schemes = [
            (scheme, receiver.Verifier(secrets=s, public_keys=k))
            for scheme, s, k in given
            if s or k
        ]

    @property
    def checks(self) -> bool:
        return bool(self._schemes)

    @property
    def banner(self) -> str:
        if not self.checks:
            return (
                "Signatures are not checked: pass --secret whsec_... (v1) or "
                "--public-key whpk_... (v1a) to verify them."
            )
        given = [
            f"{len(keys)} {name}{'s' if len(keys) > 1 else ''} ({scheme})"
            for keys, name, scheme in (
                (self.secrets, "secret", "v1"),
                (self.public_keys, "public key", "v1a"),
            )
            if keys
        ]
        return f"Signatures are verified with {' and '.join(given)}."

    def __call__(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        if not self.checks:
            return Verdict(
                False, False, "signature not checked (no --secret or --public-key given)"
            )
        reasons: dict[str, None] = {}
        for scheme, verify in self._schemes:
            try:
                verify(headers, body)
            except receiver.InvalidPayload:
                pass  # signed, though no webhook event: its body is printed as it is
            except receiver.VerificationError as exc:
                reasons[str(exc)] = None
                continue
            return Verdict(True, True, f"signature verified ({scheme})")
        return Verdict(True, False, f"signature NOT verified: {'; '.join(reasons)}")


def verifier_from_args(args: argparse.Namespace) -> Verifier:
    """The verifier the options ask for; ValueError for a malformed secret or key (at
    start, not on the first webhook)."""
    return Verifier(tuple(args.secret or ()), tuple(args.public_key or ()))
