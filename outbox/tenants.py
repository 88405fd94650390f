"""Tenants: API keys (stored hashed) and signing secrets (stored encrypted)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from . import ids
from .crypto import SecretBox
from .errors import TenantNotFound
from .models import TenantId
from .signing import generate_secret
from .store import tenants as store


@dataclass(frozen=True, slots=True)
class NewTenant:
    """What a tenant creation returns; the key and secret are shown only once."""

    id: str
    name: str
    api_key: str
    signing_secret: str

    def __repr__(self) -> str:
        return f"NewTenant(id={self.id!r}, name={self.name!r}, api_key=***, signing_secret=***)"


def hash_api_key(api_key: str) -> bytes:
    return hashlib.sha256(api_key.encode("utf-8")).digest()


async def create_tenant(conn: asyncpg.Connection, name: str, box: SecretBox) -> NewTenant:
    """Create a tenant with a fresh API key and signing secret."""
    tenant_id, api_key, secret = TenantId(ids.tenant_id()), ids.api_key(), generate_secret()
    async with conn.transaction():
        await store.insert_tenant(
            conn, tenant_id=tenant_id, name=name, api_key_hash=hash_api_key(api_key)
        )
        await store.insert_secret(
            conn, tenant_id=tenant_id, secret_enc=box.encrypt(secret, aad=tenant_id.encode())
        )
    return NewTenant(tenant_id, name, api_key, secret)


async def rotate_secret(
    conn: asyncpg.Connection, tenant_id: str, box: SecretBox, overlap_s: float
) -> str:
    """Issue a new signing secret; the current ones keep signing for ``overlap_s``."""
    secret = generate_secret()
    async with conn.transaction():
        # First, so concurrent rotations of one tenant queue on its row lock.
        if await store.bump_secret_version(conn, tenant_id=tenant_id) is None:
            raise TenantNotFound(tenant_id)
        await store.expire_secrets(conn, tenant_id=tenant_id, overlap_s=overlap_s)
        await store.insert_secret(
            conn, tenant_id=tenant_id, secret_enc=box.encrypt(secret, aad=tenant_id.encode())
        )
    return secret


async def rotate_api_key(conn: asyncpg.Connection, tenant_id: str) -> str:
    """Issue a new API key; the old one stops working when this commits."""
    api_key = ids.api_key()
    if not await store.replace_api_key(
        conn, tenant_id=tenant_id, api_key_hash=hash_api_key(api_key)
    ):
        raise TenantNotFound(tenant_id)
    return api_key


async def list_tenants(
    conn: asyncpg.Connection, *, after: tuple[datetime, str] | None, limit: int
) -> tuple[list[store.TenantRow], tuple[datetime, str] | None]:
    """A page of tenants in creation order, and the keyset position of the next page."""
    rows = await store.list_tenants(conn, after=after, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, ((rows[-1].created_at, rows[-1].id) if more else None)


async def authenticate(conn: asyncpg.Connection, api_key: str) -> str | None:
    """The tenant id an API key belongs to, or None."""
    digest = hash_api_key(api_key)
    tenant = await store.tenant_by_key_hash(conn, digest=digest)
    # The lookup is by hash already; compare_digest keeps the final check
    # constant-time should the lookup ever become a prefix or range match.
    if tenant is None or not hmac.compare_digest(tenant.api_key_hash, digest):
        return None
    return tenant.id


@dataclass(frozen=True, slots=True)
class ActiveSecrets:
    """A tenant's signing secrets, newest first, and when the first of them expires."""

    values: list[str]
    expires_at: datetime | None


async def active_secrets(
    conn: asyncpg.Connection, tenant_ids: list[str], box: SecretBox
) -> dict[str, ActiveSecrets]:
    """Decrypted secrets that currently sign, per tenant (one query)."""
    values: dict[str, list[str]] = {t: [] for t in tenant_ids}
    expiry: dict[str, datetime | None] = dict.fromkeys(tenant_ids)
    for row in await store.active_secrets(conn, tenant_ids=tenant_ids):
        tid = row.tenant_id
        values[tid].append(box.decrypt(row.secret_enc, aad=tid.encode()))
        if row.expires_at is not None:
            current = expiry[tid]
            expiry[tid] = row.expires_at if current is None else min(current, row.expires_at)
    return {t: ActiveSecrets(values[t], expiry[t]) for t in tenant_ids}
