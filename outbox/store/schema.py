"""Schema bookkeeping: the migration lock and the ``schema_version`` table."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from hookrelay.outbox.sql import sql

_LOCK = sql("apply_schema_lock")
_LOCK_TIMEOUT = sql("migration_lock_timeout")
_OUTWAIT_LOCK_TIMEOUT = sql("outwait_lock_timeout")
_AUTOVACUUM_HOLDS = sql("autovacuum_holds")
_CREATE_SCHEMA_VERSION = sql("create_schema_version")
_SCHEMA_VERSION_EXISTS = sql("schema_version_exists")
_INITIAL_TABLES_EXIST = sql("initial_tables_exist")
_ADOPT_INITIAL_SCHEMA = sql("adopt_initial_schema")
_APPLIED_MIGRATIONS = sql("applied_migrations")
_MIGRATION_APPLIED = sql("migration_applied")
_RECORD_MIGRATION = sql("record_migration")
_MARK_COMPATIBLE = sql("mark_migration_compatible")
_APPLIED_MIGRATION_ROWS = sql("applied_migration_rows")


@dataclass(frozen=True, slots=True)
class AppliedMigration:
    """A row of ``schema_version``."""

    version: int
    name: str
    applied_at: datetime
    compatible: bool


async def take_schema_lock(conn: asyncpg.Connection) -> None:
    """Hold the schema lock until the caller's transaction ends."""
    await conn.execute(_LOCK)


async def bound_lock_waits(conn: asyncpg.Connection, *, tables: int) -> None:
    """Until the transaction ends, give up on any lock not had within a short wait
    (shorter the more ``tables`` a migration locks first)."""
    await conn.execute(_LOCK_TIMEOUT, tables)


async def outwait_lock_waits(conn: asyncpg.Connection) -> None:
    """Until the transaction ends, wait for a lock long enough to outlast autovacuum."""
    await conn.execute(_OUTWAIT_LOCK_TIMEOUT)


async def autovacuum_holds(conn: asyncpg.Connection, table: str) -> bool:
    """Whether an autovacuum worker holds a lock on ``table`` now."""
    return bool(await conn.fetchval(_AUTOVACUUM_HOLDS, table))


async def prepare_versioning(conn: asyncpg.Connection) -> None:
    """Create ``schema_version`` if missing and adopt a pre-migration database."""
    await conn.execute(_CREATE_SCHEMA_VERSION)
    await conn.execute(_ADOPT_INITIAL_SCHEMA)


async def applied_migrations(conn: asyncpg.Connection) -> dict[int, datetime]:
    """Applied versions with when; empty if versioning was never set up."""
    if not await conn.fetchval(_SCHEMA_VERSION_EXISTS):
        return {}
    return {r["version"]: r["applied_at"] for r in await conn.fetch(_APPLIED_MIGRATIONS)}


async def initial_tables_exist(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval(_INITIAL_TABLES_EXIST))


async def migration_applied(conn: asyncpg.Connection, *, version: int) -> bool:
    return bool(await conn.fetchval(_MIGRATION_APPLIED, version))


async def record_migration(
    conn: asyncpg.Connection, *, version: int, name: str, compatible: bool = False
) -> None:
    await conn.execute(_RECORD_MIGRATION, version, name)
    if compatible:
        await conn.execute(_MARK_COMPATIBLE, version)


async def applied_migration_rows(conn: asyncpg.Connection) -> list[AppliedMigration]:
    """Every row of ``schema_version``, oldest first; empty if versioning was never set up."""
    if not await conn.fetchval(_SCHEMA_VERSION_EXISTS):
        return []
    return [AppliedMigration(**dict(r)) for r in await conn.fetch(_APPLIED_MIGRATION_ROWS)]
