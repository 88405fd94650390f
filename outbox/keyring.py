"""Signing keys for the dispatcher: decrypted once, cached briefly, per tenant."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import asyncpg

from .crypto import SecretBox
from .errors import ConfigurationError
from .signing import Signer
from .tenants import ActiveSecrets, active_secrets

log = logging.getLogger("hookrelay.keyring")

# Short enough that a rotation takes effect within seconds, long enough that a
# busy tenant's key is decrypted once, not per event. An entry never outlives
# the earliest expiry of the secrets in it, so the overlap ends on time.
CACHE_TTL_S = 2.0


class Keyring:
    def __init__(self, box: SecretBox, ttl_s: float = CACHE_TTL_S) -> None:
        self._box = box
        self._ttl = ttl_s
        self._cache: dict[str, tuple[float, Signer]] = {}

    async def signers(self, conn: asyncpg.Connection, tenant_ids: set[str]) -> dict[str, Signer]:
        """A signer for each tenant, loading the ones not cached (one query).

        A tenant whose secrets do not decrypt is left out (and not cached, so a
        repaired secret is used at once): the caller deals with its events,
        everyone else's still get signed.
        """
        now = time.monotonic()
        out: dict[str, Signer] = {}
        missing = []
        for tid in tenant_ids:
            hit = self._cache.get(tid)
            if hit is not None and hit[0] > now:
                out[tid] = hit[1]
            else:
                missing.append(tid)
        if not missing:
            return out
        wall = datetime.now(UTC)
        for tid, secrets in (await self._load(conn, missing)).items():
            until = now + self._ttl
            if secrets.expires_at is not None:
                until = min(until, now + (secrets.expires_at - wall).total_seconds())
            signer = Signer(secrets.values)
            self._cache[tid] = (until, signer)
            out[tid] = signer
        return out

    async def _load(
        self, conn: asyncpg.Connection, tenant_ids: list[str]
    ) -> dict[str, ActiveSecrets]:
        try:
            return await active_secrets(conn, tenant_ids, self._box)
        except ConfigurationError:
            pass
        # Some tenant's secret is unreadable: find which, one tenant at a time.
        # Rare (a corrupted row), so the extra queries do not matter.
        found: dict[str, ActiveSecrets] = {}
        for tid in tenant_ids:
            try:
                found.update(await active_secrets(conn, [tid], self._box))
            except ConfigurationError:
                log.error("cannot decrypt signing secret of tenant %s", tid)
        return found
