"""Numbered schema migrations: ``outbox/sql/migrations/NNNN_name.sql``, applied in order, once.

Each migration runs in its own transaction under the schema advisory lock and
records itself in ``schema_version`` in that same transaction, so concurrent
``migrate`` runs (or several processes starting at once) apply each file
exactly once and a failed file leaves nothing half-applied. A migration may
also have a Python step (``hookrelay.outbox.store.migration_steps``), run after its
SQL in the same transaction.

Migrations run while older releases work on the same tables. One that takes a lock
against the services' writes or autovacuum takes all its table locks in its first
statements (``LOCK TABLE``: :attr:`Migration.locks`, taken here one table at a time),
and waits only briefly for each (``migration_lock_timeout`` in queries.sql) before it
gives up and is tried again: so it stalls running transactions only briefly, and a
running transaction is never the victim of a deadlock over table locks with it. A
lock that autovacuum holds is waited for alone, for longer, so that autovacuum gives
way.

A release knows the migrations it ships. :func:`check_schema` compares them with the
database's: a migration the release does not know is refused (:class:`SchemaMismatch`,
naming it) unless its file declared it compatible with older releases
(``COMPATIBLE_MARK`` as its first line, recorded in ``schema_version.compatible``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Literal

import asyncpg

from hookrelay.outbox.errors import MigrationBlocked, SchemaMismatch
from hookrelay.outbox.store import schema
from hookrelay.outbox.store.migration_steps import STEPS
from hookrelay.outbox.store.schema import AppliedMigration

log = logging.getLogger("hookrelay.db")
# A migration that cannot take its locks (see schema.bound_lock_waits) is tried again
# after a pause growing from RETRY_BASE_S to RETRY_CAP_S, jittered, for GIVE_UP_S.
RETRY_BASE_S, RETRY_CAP_S, GIVE_UP_S = 0.05, 2.0, 300.0
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# A migration's first statements: comments, blank lines and LOCK TABLE statements.
_LEADING_LOCKS = re.compile(r"\A(?:\s+|--[^\n]*\n|LOCK TABLE [^;]+;)*", re.IGNORECASE)
_LOCK_TABLE = re.compile(r"LOCK TABLE ([^;]+?) IN ([A-Z ]+?) MODE\s*;", re.IGNORECASE)
# The first line of a migration that processes of earlier releases may run beside.
COMPATIBLE_MARK = "-- hookrelay: runs beside older releases"


@dataclass(frozen=True, slots=True)
class TableLock:
    """One table a migration locks in its first statements, and in which mode."""

    table: str
    mode: str  # as LOCK TABLE spells it: "ACCESS EXCLUSIVE", "SHARE ROW EXCLUSIVE", ...

    @property
    def sql(self) -> str:
        return f"LOCK TABLE {self.table} IN {self.mode} MODE"


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def locks(self) -> list[TableLock]:
        """The table locks its first statements take, a table each, in their order."""
        leading = _LEADING_LOCKS.match(self.sql)
        return [
            TableLock(table.strip(), " ".join(m[2].upper().split()))
            for m in _LOCK_TABLE.finditer(leading[0] if leading else "")
            for table in m[1].split(",")
        ]

    @property
    def compatible(self) -> bool:
        """Declared harmless to the releases before it (see ``COMPATIBLE_MARK``)."""
        return self.sql.startswith(COMPATIBLE_MARK + "\n")

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


MigrationState = Literal["applied", "pending", "unknown", "unknown-compatible"]


@dataclass(frozen=True, slots=True)
class MigrationStatus:
    version: int
    name: str
    state: MigrationState
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
    if conn.is_in_transaction():
        # Each migration commits on its own; inside a caller's transaction they would
        # hold one another's locks, and their lock timeout would outlive them.
        raise RuntimeError("migrate() needs a connection outside any transaction")
    done: list[Migration] = []
    for migration in migrations():
        if upto is not None and migration.version > upto:
            break
        if await _apply_yielding(conn, migration):
            done.append(migration)
    return done


class _Blocked(Exception):
    """The migration could not have one of the locks of its first statements in time."""

    def __init__(self, lock: TableLock) -> None:
        super().__init__(lock.sql)
        self.lock = lock


async def _apply_yielding(conn: asyncpg.Connection, migration: Migration) -> bool:
    """Apply one migration, trying again while running transactions hold its tables."""
    tries, give_up = 0, time.monotonic() + GIVE_UP_S
    while True:
        tries += 1
        try:
            return await _apply(conn, migration)
        except (_Blocked, asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError) as exc:
            if time.monotonic() >= give_up:
                what = exc.lock.table if isinstance(exc, _Blocked) else "its tables"
                raise MigrationBlocked(
                    f"migration {migration.label} could not lock {what} in {GIVE_UP_S:g} s "
                    "of tries: running transactions kept holding it; end them, or migrate "
                    "when the services are quieter"
                ) from exc
            if isinstance(exc, _Blocked) and await schema.autovacuum_holds(conn, exc.lock.table):
                # An autovacuum worker gives way only to a lock waited for a whole
                # deadlock_timeout: wait that long for this one table alone, then try again.
                log.warning(
                    "migration %s: autovacuum holds %s; waiting for it alone",
                    migration.label,
                    exc.lock.table,
                )
                await _outwait(conn, exc.lock)
                continue
            pause = random.uniform(0, min(RETRY_CAP_S, RETRY_BASE_S * 2 ** min(tries, 10)))
            log.warning(
                "migration %s: %s; trying again in %.2f s (try %d)",
                migration.label,
                f"{exc.lock.table} is locked by running transactions"
                if isinstance(exc, _Blocked)
                else f"{type(exc).__name__} beside running transactions",
                pause,
                tries,
            )
            await asyncio.sleep(pause)


async def _apply(conn: asyncpg.Connection, migration: Migration) -> bool:
    async with conn.transaction():
        await schema.take_schema_lock(conn)
        locks = migration.locks
        await schema.bound_lock_waits(conn, tables=len(locks))
        # A database built from schema.sql before migrations existed has
        # 0001's tables but no record of it: adopt it rather than re-run.
        await schema.prepare_versioning(conn)
        if await schema.migration_applied(conn, version=migration.version):
            return False
        for lock in locks:  # taken here one by one, to know which one it waited for
            try:
                await conn.execute(lock.sql)
            except asyncpg.LockNotAvailableError as exc:
                raise _Blocked(lock) from exc
        await conn.execute(migration.sql)
        step = STEPS.get(migration.name)
        if step is not None:  # what SQL cannot do (hookrelay.outbox.store.migration_steps)
            await step(conn)
        await schema.record_migration(
            conn,
            version=migration.version,
            name=migration.name,
            compatible=migration.compatible,
        )
        return True


async def _outwait(conn: asyncpg.Connection, lock: TableLock) -> None:
    """Wait for ``lock`` alone (holding nothing, so in no deadlock), then give it back."""
    tx = conn.transaction()
    await tx.start()
    try:
        await schema.outwait_lock_waits(conn)
        await conn.execute(lock.sql)
    except asyncpg.LockNotAvailableError:
        pass  # still held: the next try waits again
    finally:
        await tx.rollback()


@dataclass(frozen=True, slots=True)
class SchemaState:
    """The database's migrations against this release's."""

    pending: list[Migration]  # this release's, not applied yet
    unknown: list[AppliedMigration]  # applied, and not this release's

    @property
    def unknown_labels(self) -> str:
        return ", ".join(f"{m.version:04d}_{m.name}" for m in self.unknown)


async def compare(conn: asyncpg.Connection) -> SchemaState:
    """What is pending and what is unknown to this release; reads only (no DDL)."""
    rows = await schema.applied_migration_rows(conn)
    if not rows and await schema.initial_tables_exist(conn):
        # A database from before migrations: 0001's tables, no record yet.
        rows = [AppliedMigration(1, "initial", datetime.min, False)]
    known = {(m.version, m.name) for m in migrations()}
    applied = {r.version for r in rows}
    return SchemaState(
        pending=[m for m in migrations() if m.version not in applied],
        unknown=[r for r in rows if (r.version, r.name) not in known],
    )


async def check_schema(
    conn: asyncpg.Connection, *, apply: bool
) -> tuple[SchemaState, list[Migration]]:
    """Refuse a schema this release cannot run on; apply what is pending if ``apply``.

    Raises :class:`SchemaMismatch` when the database holds a migration this
    release does not know and that was not declared compatible, or (without
    ``apply``) when it lacks one this release needs. Returns the state found and
    the migrations applied. Runs DDL only when something is pending and ``apply``
    is set, so a process on an up-to-date database needs no more than DML rights.
    """
    state = await compare(conn)
    refused = [m for m in state.unknown if not m.compatible]
    if refused:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in refused)
        raise SchemaMismatch(
            f"the database has migrations this release does not know: {names}. "
            "They were not declared compatible with older releases: run a release "
            "that ships them (hookrelay migrate --status lists the database's migrations)"
        )
    if not state.pending:
        return state, []
    if not apply:
        names = ", ".join(m.label for m in state.pending)
        raise SchemaMismatch(
            f"the database lacks migrations this release needs: {names}. "
            "HOOKRELAY_MIGRATE=off: apply them first with `hookrelay migrate` "
            "(as a role that may change the schema)"
        )
    return state, await migrate(conn)


async def migration_status(conn: asyncpg.Connection) -> list[MigrationStatus]:
    """Every migration, this release's and the database's, with its state; changes nothing.

    ``unknown``: applied by a newer release, not shipped in this one;
    ``unknown-compatible``: the same, declared compatible with older releases.
    """
    applied: dict[int, datetime | None] = dict(await _applied(conn))
    if not applied and await schema.initial_tables_exist(conn):
        applied[1] = None  # the next migrate records 0001 without running it
    rows = [
        MigrationStatus(
            m.version,
            m.name,
            "applied" if m.version in applied else "pending",
            applied.get(m.version),
        )
        for m in migrations()
    ]
    for r in (await compare(conn)).unknown:
        state: MigrationState = "unknown-compatible" if r.compatible else "unknown"
        rows.append(MigrationStatus(r.version, r.name, state, r.applied_at))
    return sorted(rows, key=lambda s: (s.version, s.state))
