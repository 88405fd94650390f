"""Signing keys for the dispatcher: decrypted once, cached briefly, per tenant."""

from __future__ import annotations

import time

import asyncpg

from .crypto import SecretBox
from .signing import Signer
from .tenants import active_secrets

# Short enough that a rotation (or the end of its overlap) takes effect within
# seconds, long enough that a busy tenant's key is decrypted once, not per event.
CACHE_TTL_S = 2.0


class Keyring:
    def __init__(self, box: SecretBox, ttl_s: float = CACHE_TTL_S) -> None:
        self._box = box
        self._ttl = ttl_s
        self._cache: dict[str, tuple[float, Signer]] = {}

    async def signers(self, conn: asyncpg.Connection, tenant_ids: set[str]) -> dict[str, Signer]:
        """A signer for each tenant, loading the ones not cached (one query)."""
        now = time.monotonic()
        out: dict[str, Signer] = {}
        missing: list[str] = []
        for tid in tenant_ids:
            hit = self._cache.get(tid)
            if hit is not None and hit[0] > now:
                out[tid] = hit[1]
            else:
                missing.append(tid)
        if missing:
            for tid, secrets in (await active_secrets(conn, missing, self._box)).items():
                signer = Signer(secrets)
                self._cache[tid] = (now + self._ttl, signer)
                out[tid] = signer
        return out
