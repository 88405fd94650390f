"""Numbered schema migrations: ``outbox/sql/migrations/NNNN_name.sql``, applied in order, once.

Each migration runs in its own transaction under the schema advisory lock and
records itself in ``schema_version`` in that same transaction, so concurrent
``migrate`` runs (or several processes starting at once) apply each file
exactly once and a failed file leaves nothing half-applied. A migration may
also have a Python step (``hookrelay.outbox.store.migration_steps``), run after its SQL in the
same transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Literal

import asyncpg

from hookrelay.outbox.store import schema
from hookrelay.outbox.store.migration_steps import STEPS

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


@dataclass(frozen=True, slots=True)
class MigrationStatus:
    version: int
    name: str
    state: Literal["applied", "pending"]
    # None when pending, or when a database from before migrations has 0001's
    # tables but the adoption has not been recorded yet.
    applied_at: datetime | None


def migrations() -> list[Migration]:
    """Every migration shipped in the package, oldest first."""
    found = []
    for entry in resources.files("hookrelay.outbox.sql").joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return found


async def _applied(conn: asyncpg.Connection) -> dict[int, datetime]:
    return await schema.applied_migrations(conn)


async def migrate(conn: asyncpg.Connection, *, upto: int | None = None) -> list[Migration]:
    """Apply every pending migration (up to ``upto``); returns those this call applied."""
    done: list[Migration] = []
    for migration in migrations():
        if upto is not None and migration.version > upto:
            break
        async with conn.transaction():
            await schema.take_schema_lock(conn)
            # A database built from schema.sql before migrations existed has
            # 0001's tables but no record of it: adopt it rather than re-run.
            await schema.prepare_versioning(conn)
            if await schema.migration_applied(conn, version=migration.version):
                continue
            await conn.execute(migration.sql)
            step = STEPS.get(migration.name)
            if step is not None:  # what SQL cannot do (hookrelay.outbox.store.migration_steps)
                await step(conn)
            await schema.record_migration(conn, version=migration.version, name=migration.name)
            done.append(migration)
    return done


async def migration_status(conn: asyncpg.Connection) -> list[MigrationStatus]:
    """Every known migration with when it was applied (None if pending); changes nothing."""
    applied: dict[int, datetime | None] = dict(await _applied(conn))
    if not applied and await schema.initial_tables_exist(conn):
        applied[1] = None  # the next migrate records 0001 without running it
    return [
        MigrationStatus(
            m.version,
            m.name,
            "applied" if m.version in applied else "pending",
            applied.get(m.version),
        )
        for m in migrations()
    ]
