"""Tenants (API keys stored hashed) and signing secrets (stored encrypted)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from hookrelay.outbox.models import KeyScheme, SignatureScheme, TenantId
from hookrelay.outbox.sql import sql
from hookrelay.outbox.store import signals

_INSERT_TENANT = sql("insert_tenant")
_INSERT_SECRET = sql("insert_secret")
_EXPIRE_SECRETS = sql("expire_secrets")
_TENANT_EXISTS = sql("tenant_exists")
_BUMP_SECRET_VERSION = sql("bump_secret_version")
_TENANT_BY_KEY_HASH = sql("tenant_by_key_hash")
_ACTIVE_SECRETS = sql("active_secrets")
_LIST_TENANTS = sql("list_tenants")
_ROTATE_API_KEY = sql("rotate_api_key")

# NOTIFY channel: payload a tenant id whose API key changed (hookrelay.outbox.store.signals).
KEYS_CHANNEL = signals.KEYS.channel
_SIGNING_KEYS = sql("signing_keys")


@dataclass(frozen=True, slots=True)
class TenantKey:
    id: TenantId
    name: str
    api_key_hash: bytes


@dataclass(frozen=True, slots=True)
class TenantRow:
    id: TenantId
    name: str
    created_at: datetime
    secrets: int


@dataclass(frozen=True, slots=True)
class SecretRow:
    tenant_id: TenantId
    secret_enc: bytes
    expires_at: datetime | None
    scheme: KeyScheme


@dataclass(frozen=True, slots=True)
class SigningKeyRow:
    """One key that signs now, as a receiver may learn of it (no secret material)."""

    scheme: KeyScheme
    public_key: str | None
    created_at: datetime
    expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class Rotation:
    """What a rotation bumped: the tenant's new key version and which kinds to replace."""

    version: int
    scheme: SignatureScheme


async def insert_tenant(
    conn: asyncpg.Connection,
    *,
    tenant_id: TenantId,
    name: str,
    api_key_hash: bytes,
    scheme: SignatureScheme = "v1",
) -> None:
    await conn.execute(_INSERT_TENANT, tenant_id, name, api_key_hash, scheme)


async def insert_secret(
    conn: asyncpg.Connection,
    *,
    tenant_id: TenantId | str,
    secret_enc: bytes,
    scheme: KeyScheme = "v1",
    public_key: str | None = None,
) -> None:
    await conn.execute(_INSERT_SECRET, tenant_id, secret_enc, scheme, public_key)


async def expire_secrets(
    conn: asyncpg.Connection, *, tenant_id: TenantId | str, overlap_s: float
) -> None:
    """Every secret still signing keeps doing so for ``overlap_s`` more seconds, no longer."""
    await conn.execute(_EXPIRE_SECRETS, tenant_id, float(overlap_s))


async def bump_secret_version(conn: asyncpg.Connection, *, tenant_id: str) -> Rotation | None:
    """The tenant's next key version, row-locked until commit; None if no such tenant."""
    row = await conn.fetchrow(_BUMP_SECRET_VERSION, tenant_id)
    return Rotation(row[0], row[1]) if row is not None else None


async def tenant_exists(conn: asyncpg.Connection, *, tenant_id: str) -> bool:
    return bool(await conn.fetchval(_TENANT_EXISTS, tenant_id))


async def tenant_by_key_hash(conn: asyncpg.Connection, *, digest: bytes) -> TenantKey | None:
    row = await conn.fetchrow(_TENANT_BY_KEY_HASH, digest)
    return TenantKey(*row) if row is not None else None


async def active_secrets(conn: asyncpg.Connection, *, tenant_ids: Sequence[str]) -> list[SecretRow]:
    """Secrets that sign now, per tenant newest first."""
    return [SecretRow(*r) for r in await conn.fetch(_ACTIVE_SECRETS, tenant_ids)]


async def list_tenants(
    conn: asyncpg.Connection, *, after: tuple[datetime, str] | None, limit: int
) -> list[TenantRow]:
    """Tenants in creation order, after the keyset position ``after``."""
    at, ident = after if after is not None else (None, None)
    return [TenantRow(*r) for r in await conn.fetch(_LIST_TENANTS, at, ident, limit)]


async def replace_api_key(conn: asyncpg.Connection, *, tenant_id: str, api_key_hash: bytes) -> bool:
    """Swap the tenant's key hash and announce it at commit; False if no such tenant."""
    return await conn.fetchrow(_ROTATE_API_KEY, tenant_id, api_key_hash, KEYS_CHANNEL) is not None


async def signing_keys(
    conn: asyncpg.Connection, *, tenant_id: str
) -> tuple[SignatureScheme, list[SigningKeyRow]] | None:
    """The tenant's scheme and the keys that sign now, newest first; None if no such tenant."""
    rows = await conn.fetch(_SIGNING_KEYS, tenant_id)
    if not rows:
        return None
    keys = [SigningKeyRow(*r[1:]) for r in rows if r[1] is not None]
    return rows[0][0], keys
