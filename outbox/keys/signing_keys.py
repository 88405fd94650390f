"""Signing keys of a tenant, stored encrypted: issue, rotate, and read them.

A tenant's ``signature_scheme`` says what its webhooks carry: ``v1`` HMAC
signatures (a ``whsec_`` secret), ``v1a`` Ed25519 signatures (a ``whsk_``
private key whose ``whpk_`` public key receivers verify with), or ``both``.
Every key is sealed by the master key with the tenant id as associated data.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from hookrelay.outbox.errors import TenantNotFound
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.keys.ed25519 import generate_keypair
from hookrelay.outbox.keys.signing import generate_secret
from hookrelay.outbox.models import SignatureScheme
from hookrelay.outbox.store import tenants as store
from hookrelay.outbox.store.tenants import SigningKeyRow

__all__ = [
    "ActiveSecrets",
    "NewKeys",
    "SigningKeyRow",
    "active_secrets",
    "issue_keys",
    "list_signing_keys",
    "rotate_secret",
]


@dataclass(frozen=True, slots=True)
class NewKeys:
    """Keys just issued: the ``whsec_`` secret (v1) and/or ``whpk_`` public key (v1a)."""

    signing_secret: str | None
    public_key: str | None

    def __repr__(self) -> str:
        return f"NewKeys(signing_secret=***, public_key={self.public_key!r})"


async def issue_keys(
    conn: asyncpg.Connection, tenant_id: str, scheme: SignatureScheme, box: SecretBox
) -> NewKeys:
    """Store a fresh secret and/or key pair for ``scheme``, each encrypted under ``box``."""
    aad = tenant_id.encode()
    secret = public = None
    if scheme in ("v1", "both"):
        secret = generate_secret()
        await store.insert_secret(
            conn, tenant_id=tenant_id, secret_enc=box.encrypt(secret, aad=aad)
        )
    if scheme in ("v1a", "both"):
        pair = generate_keypair()
        public = pair.public_key
        await store.insert_secret(
            conn,
            tenant_id=tenant_id,
            secret_enc=box.encrypt(pair.private_key, aad=aad),
            scheme="v1a",
            public_key=public,
        )
    return NewKeys(secret, public)


async def rotate_secret(
    conn: asyncpg.Connection, tenant_id: str, box: SecretBox, overlap_s: float
) -> NewKeys:
    """Issue new signing keys of the tenant's scheme; the current ones keep signing
    for ``overlap_s``. Every event claimed after the commit is signed with the new ones."""
    async with conn.transaction():
        # First, so concurrent rotations of one tenant queue on its row lock.
        rotation = await store.bump_secret_version(conn, tenant_id=tenant_id)
        if rotation is None:
            raise TenantNotFound(tenant_id)
        await store.expire_secrets(conn, tenant_id=tenant_id, overlap_s=overlap_s)
        return await issue_keys(conn, tenant_id, rotation.scheme, box)


@dataclass(frozen=True, slots=True)
class ActiveSecrets:
    """A tenant's signing material, newest first, and when the first of it expires:
    ``values`` the ``whsec_`` secrets, ``keys`` the ``whsk_`` Ed25519 private keys."""

    values: list[str]
    expires_at: datetime | None
    keys: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"ActiveSecrets(<{len(self.values)} secret(s), {len(self.keys)} key(s)>)"


async def active_secrets(
    conn: asyncpg.Connection, tenant_ids: list[str], box: SecretBox
) -> dict[str, ActiveSecrets]:
    """Decrypted secrets and keys that currently sign, per tenant (one query)."""
    values: dict[str, list[str]] = {t: [] for t in tenant_ids}
    keys: dict[str, list[str]] = {t: [] for t in tenant_ids}
    expiry: dict[str, datetime | None] = dict.fromkeys(tenant_ids)
    for row in await store.active_secrets(conn, tenant_ids=tenant_ids):
        tid = row.tenant_id
        plain = box.decrypt(row.secret_enc, aad=tid.encode())
        (keys if row.scheme == "v1a" else values)[tid].append(plain)
        if row.expires_at is not None:
            current = expiry[tid]
            expiry[tid] = row.expires_at if current is None else min(current, row.expires_at)
    return {t: ActiveSecrets(values[t], expiry[t], tuple(keys[t])) for t in tenant_ids}


async def list_signing_keys(
    conn: asyncpg.Connection, tenant_id: str
) -> tuple[SignatureScheme, list[SigningKeyRow]]:
    """The tenant's scheme and every key that signs now (public parts only), newest first."""
    found = await store.signing_keys(conn, tenant_id=tenant_id)
    if found is None:
        raise TenantNotFound(tenant_id)
    return found
