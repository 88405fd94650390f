"""Tenants: API keys (stored hashed), and the signing keys they start with.

The signing keys themselves (issue, rotate, read) are :mod:`hookrelay.outbox.keys.signing_keys`;
their names are re-exported here, where callers have always found them.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from hookrelay.outbox import ids
from hookrelay.outbox.errors import TenantNotFound
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.keys.signing_keys import (
    ActiveSecrets,
    NewKeys,
    SigningKeyRow,
    active_secrets,
    issue_keys,
    list_signing_keys,
    rotate_secret,
)
from hookrelay.outbox.models import SignatureScheme, TenantId
from hookrelay.outbox.store import tenants as store

__all__ = [
    "ActiveSecrets",
    "NewKeys",
    "NewTenant",
    "SigningKeyRow",
    "active_secrets",
    "authenticate",
    "create_tenant",
    "hash_api_key",
    "list_signing_keys",
    "list_tenants",
    "rotate_api_key",
    "rotate_secret",
]


@dataclass(frozen=True, slots=True)
class NewTenant:
    """What a tenant creation returns; the key and secret are shown only once."""

    id: str
    name: str
    api_key: str
    signing_secret: str | None
    public_key: str | None = None
    signature_scheme: SignatureScheme = "v1"

    def __repr__(self) -> str:
        return f"NewTenant(id={self.id!r}, name={self.name!r}, api_key=***, signing_secret=***)"

    def to_resource(self) -> dict[str, Any]:
        """The creation answer: credentials a v1 tenant signs with (``signingSecret``) or a
        v1a tenant's receivers verify with (``publicKey``); null when the scheme has none."""
        return {
            "id": self.id,
            "name": self.name,
            "signatureScheme": self.signature_scheme,
            "apiKey": self.api_key,
            "signingSecret": self.signing_secret,
            "publicKey": self.public_key,
        }


def hash_api_key(api_key: str) -> bytes:
    return hashlib.sha256(api_key.encode("utf-8")).digest()


async def create_tenant(
    conn: asyncpg.Connection, name: str, box: SecretBox, scheme: SignatureScheme = "v1"
) -> NewTenant:
    """Create a tenant with a fresh API key and the signing keys its ``scheme`` needs."""
    tenant_id, api_key = TenantId(ids.tenant_id()), ids.api_key()
    async with conn.transaction():
        await store.insert_tenant(
            conn,
            tenant_id=tenant_id,
            name=name,
            api_key_hash=hash_api_key(api_key),
            scheme=scheme,
        )
        keys = await issue_keys(conn, tenant_id, scheme, box)
    return NewTenant(tenant_id, name, api_key, keys.signing_secret, keys.public_key, scheme)


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
