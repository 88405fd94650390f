"""Migrations: they build exactly schema.sql, adopt pre-migration databases, upgrade live data."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.errors import MigrationBlocked
from hookrelay.outbox.keys.signing import generate_secret
from hookrelay.outbox.ops.dead_letters import replay_one
from hookrelay.outbox.store import migrations as migrations_module
from hookrelay.outbox.store import schema as schema_module
from hookrelay.outbox.store.migration_steps import STEPS
from hookrelay.outbox.store.migrations import Migration, migrate, migration_status, migrations
from hookrelay.outbox.store.pool import create_pool, schema_sql
from hookrelay.outbox.tenants import hash_api_key
from tests.conftest import NewDb
from tests.support import ROOT, cli_env, dispatcher, run_cli, wait_drained

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

# The schema as the catalog sees it, every part that could differ between two
# ways of building it. Only user tables in `public`.
CATALOG = {
    # Column order by rank, not attnum: a column a migration dropped leaves a
    # gap in attnum that a table built whole does not have.
    "columns": """
        SELECT table_name,
               row_number() OVER (PARTITION BY table_name ORDER BY ordinal_position),
               column_name, data_type, udt_name,
               column_default, is_nullable, character_maximum_length, numeric_precision
          FROM information_schema.columns WHERE table_schema = 'public'
         ORDER BY 1, 2""",
    "constraints": """
        SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
          FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
         ORDER BY 1, 2""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
         WHERE schemaname = 'public' ORDER BY 1, 2""",
    "relations": """
        SELECT c.relname, c.relkind, c.reloptions FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
         ORDER BY 1""",
}


async def catalog(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = await asyncpg.connect(dsn)
    try:
        return {k: [tuple(r) for r in await conn.fetch(q)] for k, q in CATALOG.items()}
    finally:
        await conn.close()


async def run_sql(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def run_migrate(dsn: str, *, upto: int | None = None) -> list[int]:
    conn = await asyncpg.connect(dsn)
    try:
        return [m.version for m in await migrate(conn, upto=upto)]
    finally:
        await conn.close()


async def test_migrations_build_exactly_schema_sql(new_db: NewDb) -> None:
    from_schema, from_migrations = await new_db(), await new_db()
    await run_sql(from_schema, schema_sql())
    assert await run_migrate(from_migrations) == [m.version for m in migrations()]
    want, got = await catalog(from_schema), await catalog(from_migrations)
    assert want["relations"], "schema.sql created nothing"
    for part in CATALOG:
        assert got[part] == want[part], part


async def test_database_from_before_migrations_is_adopted_not_rerun(new_db: NewDb) -> None:
    dsn = await new_db()
    await run_sql(dsn, migrations()[0].sql)  # what schema.sql created before migrations
    # A mark re-running 0001 would undo: one of its indexes, dropped.
    await run_sql(dsn, "DROP INDEX delivery_attempts_time")
    conn = await asyncpg.connect(dsn)
    try:
        before = await migration_status(conn)
        assert [(m.version, m.state) for m in before][:2] == [(1, "applied"), (2, "pending")]
        assert await migrate(conn) and [m.state for m in await migration_status(conn)] == (
            ["applied"] * len(migrations())
        )
        assert await conn.fetchval("SELECT to_regclass('delivery_attempts_time')") is None
        assert await conn.fetchval("SELECT to_regclass('master_key_check')") is not None
    finally:
        await conn.close()


async def test_concurrent_migrations_apply_each_file_once(new_db: NewDb) -> None:
    dsn = await new_db()
    results = await asyncio.gather(*(run_migrate(dsn) for _ in range(4)))
    applied = sorted(v for r in results for v in r)
    assert applied == [m.version for m in migrations()]
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM schema_version") == len(migrations())
    finally:
        await conn.close()


async def test_migrate_status_command(new_db: NewDb, runtime) -> None:
    dsn = await new_db()
    await run_migrate(dsn, upto=1)
    code, out, err = await run_cli("migrate", "--status", env=cli_env(runtime, dsn))
    assert code == 0, err
    assert "0001  initial" in out and "0002  master_key_check" in out
    assert f"1 applied, {len(migrations()) - 1} pending" in out
    code, _, err = await run_cli("migrate", env=cli_env(runtime, dsn))
    assert code == 0, err
    code, out, _ = await run_cli("migrate", "--status", env=cli_env(runtime, dsn))
    assert f"{len(migrations())} applied, 0 pending" in out


async def test_upgrade_with_rows_in_every_table_keeps_working(
    new_db: NewDb, runtime, receiver
) -> None:
    dsn = await new_db()
    assert await run_migrate(dsn, upto=1) == [1]
    pool = await create_pool(dsn, min_size=1, max_size=10)
    try:
        async with pool.acquire() as conn:
            # Rows as the first release wrote them, in its own columns: today's
            # functions may write columns that later migrations add.
            tenant_id, pending_event, dead_event = await _rows_of_release_one(
                conn, runtime, receiver.url
            )
            dead_id = "task_v1dead"
            # The second event gave up earlier: an attempt, a dead letter, an unhealthy host.
            await conn.execute(
                """
                INSERT INTO dead_letters (event_id, tenant_id, task_id, event_type, callback_url,
                                          host, body, created_at, attempts, last_error)
                SELECT event_id, tenant_id, task_id, event_type, callback_url, host, body,
                       created_at, 1, 'HTTP 500' FROM outbox WHERE event_id = $1;
                DELETE FROM outbox WHERE event_id = $1;
                INSERT INTO delivery_attempts (event_id, task_id, tenant_id, number,
                                               attempted_at, duration_ms, outcome, status_code)
                VALUES ($1, $2, $3, 1, now(), 3.5, 'dead', 500);
                INSERT INTO destinations (host, consecutive_failures, last_error)
                VALUES ('127.0.0.1', 1, 'HTTP 500');
            """.replace("$1", f"'{dead_event}'")
                .replace("$2", f"'{dead_id}'")
                .replace("$3", f"'{tenant_id}'")
            )
            tables = [
                r["relname"]
                for r in await conn.fetch(
                    "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = 'public' AND relkind = 'r' AND relname <> 'schema_version'"
                )
            ]
            for table in tables:
                assert await conn.fetchval(f"SELECT count(*) FROM {table}"), table

            assert [m.version for m in await migrate(conn)] == [m.version for m in migrations()[1:]]
            assert [m.state for m in await migration_status(conn)] == ["applied"] * len(
                migrations()
            )

        upgraded = replace(runtime, dsn=dsn)
        async with running(dispatcher(upgraded, pool)):
            await receiver.wait_for(1)
            async with pool.acquire() as conn:
                await replay_one(conn, dead_event, by="test")
            await receiver.wait_for(2)
            await wait_drained(pool)
        sent = [r.headers["webhook-id"] for r in receiver.received]
        assert sorted(sent) == sorted([pending_event, dead_event])
        task = await pool.fetchrow("SELECT delivery_status FROM tasks WHERE id = $1", dead_id)
        assert task["delivery_status"] == "delivered"
    finally:
        await pool.close()


async def _rows_of_release_one(
    conn: asyncpg.Connection, runtime: Any, url: str
) -> tuple[str, str, str]:
    """A tenant, a task with an idempotency key and an event waiting, and a second
    finished task whose event is in the outbox; written with 0001's columns only."""
    tenant_id = "ten_v1"
    await conn.execute(
        "INSERT INTO tenants (id, name, api_key_hash) VALUES ($1, 'acme', $2)",
        tenant_id,
        hash_api_key("hr_v1"),
    )
    await conn.execute(
        "INSERT INTO signing_secrets (tenant_id, secret_enc) VALUES ($1, $2)",
        tenant_id,
        runtime.secret_box.encrypt(generate_secret(), aad=tenant_id.encode()),
    )
    events = []
    for task_id, final in (("task_v1pending", "succeeded"), ("task_v1dead", "failed")):
        event_id = "evt_" + task_id.removeprefix("task_")
        await conn.execute(
            "INSERT INTO tasks (id, tenant_id, type, status, callback_url, completed_at, version,"
            " event_id, delivery_status, next_attempt_at)"
            " VALUES ($1, $2, 't', $3, $4, now(), 2, $5, 'pending', now())",
            task_id,
            tenant_id,
            final,
            url,
            event_id,
        )
        body = json.dumps(
            {
                "type": f"task.{final}",
                "timestamp": "2026-01-01T00:00:00Z",
                "data": {"id": task_id, "status": final},
            }
        )
        await conn.execute(
            "INSERT INTO outbox (event_id, tenant_id, task_id, event_type, callback_url, host,"
            " body) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            event_id,
            tenant_id,
            task_id,
            f"task.{final}",
            url,
            urlsplit(url).netloc,
            body,
        )
        events.append(event_id)
    await conn.execute(
        "INSERT INTO idempotency_keys (tenant_id, key, request_hash, task_id)"
        " VALUES ($1, 'k1', $2, 'task_v1pending')",
        tenant_id,
        b"\x00" * 32,
    )
    return tenant_id, events[0], events[1]


def test_readable_schema_is_the_packaged_one() -> None:
    """schema.sql at the top is a copy for readers of outbox/sql/schema.sql, which is shipped."""
    assert (ROOT / "schema.sql").read_text() == schema_sql()


async def test_migrate_status_shows_a_schema_from_before_migrations(new_db: NewDb, runtime) -> None:
    dsn = await new_db()
    await run_sql(dsn, migrations()[0].sql)
    code, out, err = await run_cli("migrate", "--status", env=cli_env(runtime, dsn))
    assert code == 0, err
    first = next(line for line in out.splitlines() if line.startswith("0001"))
    assert first.endswith("applied  (from before migrations; recorded at the next migrate)")
    assert f"1 applied, {len(migrations()) - 1} pending" in out


async def _waiting_on_a_lock(conn: asyncpg.Connection, pid: int) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid
        )
    )


async def test_a_migration_yields_to_a_running_release_instead_of_deadlocking_it(
    new_db: NewDb, caplog: pytest.LogCaptureFixture
) -> None:
    # 0024 changes outbox and adds keys referencing tasks and tenants. A release already
    # running writes outbox and then tasks in one transaction (an outcome: the row out of
    # the outbox, the task's delivery summary). The migration must never make that
    # transaction a deadlock's victim: its outcome would be lost and the event sent twice.
    dsn = await new_db()
    await run_migrate(dsn, upto=23)
    old, other, watch, migrating = [await asyncpg.connect(dsn) for _ in range(4)]
    try:
        # Another transaction holds tenants for a moment: the migration, if it took tasks
        # first, waits there holding tasks while the old release's transaction starts.
        other_tx, old_tx = other.transaction(), old.transaction()
        await other_tx.start()
        await other.execute("UPDATE tenants SET name = name WHERE id = 'none'")
        await old_tx.start()
        await old.execute("DELETE FROM outbox WHERE id = -1")
        caplog.set_level(logging.WARNING, logger="hookrelay.db")
        applying = asyncio.create_task(migrate(migrating))
        pid = migrating.get_server_pid()
        for _ in range(1000):  # its waits are short, and it pauses between them
            if await _waiting_on_a_lock(watch, pid):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the migration never waited on a lock")
        outcome = asyncio.create_task(
            old.execute("UPDATE tasks SET updated_at = now() WHERE id = 'none'")
        )
        await asyncio.sleep(0.3)
        await other_tx.commit()
        await asyncio.wait_for(outcome, 10)  # not "deadlock detected"
        await old_tx.commit()
        assert [m.version for m in await asyncio.wait_for(applying, 30)] == [24]
        # It gave way (its lock wait ran out) and was applied on a later try.
        assert "0024_ordered_delivery: outbox is locked by running transactions" in caplog.text
    finally:
        for conn in (old, other, watch, migrating):
            await conn.close()


SLOW = """
CREATE TABLE slow_keys (task_id text REFERENCES tasks (id));
SELECT pg_sleep(0.95);
ALTER TABLE outbox ADD COLUMN slow integer;
"""
SLOW_LOCKS = """
LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE;
LOCK TABLE tasks IN SHARE ROW EXCLUSIVE MODE;
"""


async def test_a_slow_migration_beside_a_running_release_takes_its_locks_first(
    new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Why migrations take their locks first: one that held tasks through slow work
    # (here without the LOCK statements) and only then asked for outbox would close a
    # cycle with a running transaction that began waiting on tasks long before, and that
    # one would be cancelled: deadlock detected (its own short lock waits do not save it).
    # Taking outbox first, the migration holds nothing the running one waits for.
    dsn = await new_db()
    await run_migrate(dsn)
    slow = Migration(len(migrations()) + 1, "slow", SLOW_LOCKS + SLOW)
    monkeypatch.setattr(migrations_module, "migrations", lambda: [*migrations(), slow])
    old, migrating = [await asyncpg.connect(dsn) for _ in range(2)]
    try:
        old_tx = old.transaction()
        await old_tx.start()
        await old.execute("DELETE FROM outbox WHERE id = -1")
        applying = asyncio.create_task(migrate(migrating))
        await asyncio.sleep(0.05)  # the migration waits for outbox
        await asyncio.wait_for(
            old.execute("UPDATE tasks SET updated_at = now() WHERE id = 'none'"), 10
        )
        await asyncio.sleep(1.2)  # past the deadlock_timeout of a cycle, were there one
        await old_tx.commit()
        assert [m.name for m in await asyncio.wait_for(applying, 30)] == ["slow"]
    finally:
        for conn in (old, migrating):
            await conn.close()


async def test_a_lock_autovacuum_holds_is_waited_for_alone(
    new_db: NewDb, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Autovacuum gives a table up only to a lock waited for a whole deadlock_timeout,
    # longer than a migration's waits: that one lock is then waited for on its own. The
    # holder here is a session taking autovacuum's lock mode, said to be autovacuum.
    dsn = await new_db()
    await run_migrate(dsn, upto=23)
    said: list[str] = []

    async def autovacuum_holds(conn: asyncpg.Connection, table: str) -> bool:
        said.append(table)
        return True

    monkeypatch.setattr(schema_module, "autovacuum_holds", autovacuum_holds)
    caplog.set_level(logging.WARNING, logger="hookrelay.db")
    vacuum, migrating = [await asyncpg.connect(dsn) for _ in range(2)]
    try:
        tx = vacuum.transaction()
        await tx.start()
        await vacuum.execute("LOCK TABLE outbox IN SHARE UPDATE EXCLUSIVE MODE")
        applying = asyncio.create_task(migrate(migrating))
        await asyncio.sleep(0.6)  # longer than a migration's wait, not than its wait alone
        await tx.rollback()
        assert [m.version for m in await asyncio.wait_for(applying, 30)] == [24]
    finally:
        for conn in (vacuum, migrating):
            await conn.close()
    assert said and set(said) == {"outbox"}
    assert "0024_ordered_delivery: autovacuum holds outbox; waiting for it alone" in caplog.text
    assert "trying again" not in caplog.text  # no pause after waiting alone


async def test_a_migration_blocked_for_good_says_which_table_and_changes_nothing(
    new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = await new_db()
    await run_migrate(dsn, upto=23)
    monkeypatch.setattr(migrations_module, "GIVE_UP_S", 0.5)
    holder, migrating = [await asyncpg.connect(dsn) for _ in range(2)]
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("DELETE FROM outbox WHERE id = -1")
        with pytest.raises(MigrationBlocked, match="0024_ordered_delivery could not lock outbox"):
            await migrate(migrating)
        await tx.rollback()
        assert not await migrating.fetchval(
            "SELECT count(*) FROM schema_version WHERE version = 24"
        )
        assert await migrating.fetchval("SELECT to_regclass('ordering_keys')") is None
    finally:
        for conn in (holder, migrating):
            await conn.close()


# PostgreSQL's table lock modes (pg_locks' names), each with those it conflicts with.
_MODES = [
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
]
_AS, _RS, _RX, _SUX, _S, _SRX, _X, _AX = _MODES
CONFLICTS = {
    _AS: {_AX},
    _RS: {_X, _AX},
    _RX: {_S, _SRX, _X, _AX},
    _SUX: {_SUX, _S, _SRX, _X, _AX},
    _S: {_RX, _SUX, _SRX, _X, _AX},
    _SRX: {_RX, _SUX, _S, _SRX, _X, _AX},
    _X: {_RS, _RX, _SUX, _S, _SRX, _X, _AX},
    _AX: set(_MODES),
}
# What blocks the services' writes (their ROW EXCLUSIVE).
_STRONG = CONFLICTS[_RX]


async def _table_locks(
    conn: asyncpg.Connection, sql: str, tables: set[str], step: Any = None
) -> dict[str, set[str]]:
    """Every lock ``sql`` (and ``step``) takes on each of ``tables``, but plain reads'."""
    taken: dict[str, set[str]] = {}
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute(sql)
        if step is not None:
            await step(conn)
        rows = await conn.fetch(
            "SELECT c.relname, l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.granted"
        )
    finally:
        await tx.rollback()
    for r in rows:
        if r["relname"] in tables and r["mode"] != "AccessShareLock":
            taken.setdefault(r["relname"], set()).add(r["mode"])
    return taken


async def test_a_migration_takes_the_locks_it_needs_in_its_first_statements(
    new_db: NewDb,
) -> None:
    # What makes the tests above hold for every migration declared to run beside older
    # releases: one that takes a lock against the services' writes or against
    # autovacuum takes every lock it needs at its start, where the runner takes them.
    # Taken later, a lock held meanwhile closes a cycle with a running transaction that
    # started waiting first, and the deadlock detector cancels that one; and a lock
    # autovacuum holds is waited for alone only among those.
    dsn = await new_db()
    await run_migrate(dsn, upto=1)
    conn = await asyncpg.connect(dsn)
    missing: dict[str, dict[str, list[str]]] = {}
    try:
        for m in migrations()[1:]:
            tables = {
                r["relname"]
                for r in await conn.fetch(
                    "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = 'public' AND relkind = 'r'"
                )
            }
            taken = await _table_locks(conn, m.sql, tables, STEPS.get(m.name))
            # Blocking the services' writes, or an autovacuum (SHARE UPDATE EXCLUSIVE).
            blocking = [t for t, modes in taken.items() if modes & (_STRONG | CONFLICTS[_SUX])]
            if m.compatible and blocking:
                first = await _table_locks(
                    conn, ";".join([*(lock.sql for lock in m.locks), "SELECT 1"]), tables
                )
                # A mode asked for later is granted at once if every mode that conflicts
                # with it already conflicts with one held since the start.
                late = {
                    t: sorted(
                        mode
                        for mode in modes
                        if not CONFLICTS[mode]
                        <= set().union(*(CONFLICTS[h] for h in first.get(t, ())))
                    )
                    for t, modes in taken.items()
                }
                if late := {t: modes for t, modes in late.items() if modes}:
                    missing[m.label] = late
            await run_migrate(dsn, upto=m.version)
    finally:
        await conn.close()
    assert not missing, "\n".join(f"{k}: {v}" for k, v in missing.items())
