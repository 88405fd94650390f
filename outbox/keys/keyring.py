"""Signing keys for the dispatcher: decrypted once, cached per (tenant, key version).

A rotation bumps ``tenants.secret_version`` in its own transaction, and every
claimed event carries the version current at the claim; a cached signer of
another version is not used. So an event claimed after a rotation commits is
signed with the new key, with no wait for the cache to expire.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime

import asyncpg

from hookrelay.outbox.errors import ConfigurationError
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.keys.signing import Signer
from hookrelay.outbox.keys.signing_keys import ActiveSecrets, active_secrets

log = logging.getLogger("hookrelay.keyring")

# Rotations are seen through the version, not the clock; the TTL only bounds
# how long a key changed behind hookrelay's back (by hand in the database)
# keeps signing. An entry never outlives the earliest expiry of the secrets in
# it, so a rotation's overlap still ends on time.
CACHE_TTL_S = 30.0


class Keyring:
    def __init__(self, box: SecretBox, ttl_s: float = CACHE_TTL_S) -> None:
        self._box = box
        self._ttl = ttl_s
        # tenant id -> (key version, valid until (monotonic), signer)
        self._cache: dict[str, tuple[int, float, Signer]] = {}
        # Tenants the last call left out because nothing of theirs signs now: no
        # secret or key that has not expired (deleted by hand, or the tenant with it).
        self.keyless: set[str] = set()

    async def signers(
        self, conn: asyncpg.Connection, versions: Mapping[str, int]
    ) -> dict[str, Signer]:
        """A signer for each tenant at the key version read with its claim.

        Tenants not cached at that version are loaded in one query. A tenant
        whose secrets do not decrypt is left out (and not cached, so a repaired
        secret is used at once): the caller deals with its events, everyone
        else's still get signed. So is a tenant with nothing that signs now,
        named in :attr:`keyless`.
        """
        self.keyless = set()
        now = time.monotonic()
        out: dict[str, Signer] = {}
        missing = []
        for tid, version in versions.items():
            hit = self._cache.get(tid)
            if hit is not None and hit[0] == version and hit[1] > now:
                out[tid] = hit[2]
            else:
                missing.append(tid)
        if not missing:
            return out
        wall = datetime.now(UTC)
        for tid, secrets in (await self._load(conn, missing)).items():
            if not secrets.values and not secrets.keys:
                # Before, Signer() raised here, and every claim round that took one of
                # this tenant's events failed, holding back the events claimed with it.
                self.keyless.add(tid)
                continue
            until = now + self._ttl
            if secrets.expires_at is not None:
                until = min(until, now + (secrets.expires_at - wall).total_seconds())
            signer = Signer(secrets.values, secrets.keys)
            # Loaded after the claim, so these keys are at least that version;
            # a newer rotation is caught by the next claim's version.
            self._cache[tid] = (versions[tid], until, signer)
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
