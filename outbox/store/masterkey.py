"""The master key check row and the re-encryption of every signing secret."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from hookrelay.outbox.models import TenantId
from hookrelay.outbox.sql import sql

_MASTER_KEY_CHECK = sql("master_key_check")
_LOCK = sql("lock_master_key_check")
_RECORD = sql("record_master_key_check")
_ALL_SECRETS_FOR_UPDATE = sql("all_secrets_for_update")
_REENCRYPT = sql("reencrypt_secrets")
_ALL_CALLBACK_HEADERS_FOR_UPDATE = sql("all_callback_headers_for_update")
_REENCRYPT_CALLBACK_HEADERS = sql("reencrypt_callback_headers")


@dataclass(frozen=True, slots=True)
class KeyCheckRow:
    key_id: str
    check_enc: bytes


@dataclass(frozen=True, slots=True)
class StoredSecret:
    id: int
    tenant_id: TenantId
    secret_enc: bytes


async def key_check(conn: asyncpg.Connection) -> KeyCheckRow | None:
    row = await conn.fetchrow(_MASTER_KEY_CHECK)
    return None if row is None else KeyCheckRow(str(row["key_id"]), row["check_enc"])


async def lock_key_check(conn: asyncpg.Connection) -> None:
    """Serialise recording and rotating the key check until the transaction ends."""
    await conn.execute(_LOCK)


async def record_key_check(conn: asyncpg.Connection, *, key_id: str, check_enc: bytes) -> None:
    await conn.execute(_RECORD, key_id, check_enc)


async def secrets_for_update(conn: asyncpg.Connection) -> list[StoredSecret]:
    """Every signing secret, row-locked until the caller's transaction ends."""
    return [
        StoredSecret(r["id"], TenantId(r["tenant_id"]), r["secret_enc"])
        for r in await conn.fetch(_ALL_SECRETS_FOR_UPDATE)
    ]


async def reencrypt_secrets(
    conn: asyncpg.Connection, *, ids: Sequence[int], blobs: Sequence[bytes]
) -> None:
    await conn.execute(_REENCRYPT, list(ids), list(blobs))


async def callback_headers_for_update(conn: asyncpg.Connection) -> list[tuple[str, bytes]]:
    """(task id, sealed callback headers) of every task that has some, row-locked until
    the caller's transaction ends."""
    return [(r["task_id"], r["sealed"]) for r in await conn.fetch(_ALL_CALLBACK_HEADERS_FOR_UPDATE)]


async def reencrypt_callback_headers(
    conn: asyncpg.Connection, *, task_ids: Sequence[str], blobs: Sequence[bytes]
) -> None:
    await conn.execute(_REENCRYPT_CALLBACK_HEADERS, list(task_ids), list(blobs))
