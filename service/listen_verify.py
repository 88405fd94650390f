"""How ``hookrelay listen`` judges a webhook's signature: with the library's own verifier.

``--secret whsec_...`` checks ``v1`` (HMAC) signatures, ``--public-key whpk_...``
``v1a`` (Ed25519) ones; each may be given more than once, for the old and the new
key while a rotation overlaps. With both, either scheme verifying is enough.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from hookrelay.outbox.errors import SignatureError
from hookrelay.outbox.keys import ed25519, signing


@dataclass(frozen=True)
class Verdict:
    checked: bool
    ok: bool
    text: str


@dataclass(frozen=True)
class Verifier:
    """Verifies with ``whsec_`` secrets and ``whpk_`` public keys, or (none given) only
    says it did not check."""

    secrets: tuple[str, ...] = ()
    public_keys: tuple[str, ...] = ()

    @property
    def checks(self) -> bool:
        return bool(self.secrets or self.public_keys)

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
        for scheme, secrets, keys in (
            ("v1", self.secrets, ()),
            ("v1a", (), self.public_keys),
        ):
            if not secrets and not keys:
                continue
            try:
                signing.verify(secrets, headers, body, public_keys=keys)
            except SignatureError as exc:
                reasons[str(exc)] = None
                continue
            return Verdict(True, True, f"signature verified ({scheme})")
        return Verdict(True, False, f"signature NOT verified: {'; '.join(reasons)}")


def verifier_from_args(args: argparse.Namespace) -> Verifier:
    """The verifier the options ask for; ConfigurationError for a malformed secret or key."""
    secrets = tuple(args.secret or ())
    public_keys = tuple(args.public_key or ())
    # Fail at start, not on the first webhook.
    for secret in secrets:
        signing.secret_key(secret)
    for key in public_keys:
        ed25519.load_public_key(key)
    return Verifier(secrets, public_keys)
