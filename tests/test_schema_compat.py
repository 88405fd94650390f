"""Schema compatibility: a process meets a database migrated by another release.

A migration this release does not know stops it at start, naming the migration,
unless the migration's file declared it compatible with older releases; then it
warns and runs. ``HOOKRELAY_MIGRATE=off`` runs no DDL: a missing migration is
refused, and a role with DML rights only runs the whole service.
"""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import pytest

from hookrelay.outbox.store.migrations import COMPATIBLE_MARK, migrate, migrations
from tests.conftest import NewDb
from tests.receiver import Receiver
from tests.support import ADMIN, ServeProcess, cli_env, master_key, run_cli, service_env

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


async def _migrated(dsn: str, *, upto: int | None = None) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn, upto=upto)
    finally:
        await conn.close()


async def _future_migration(dsn: str, *, compatible: bool) -> None:
    """What a newer release's ``migrate`` leaves: a row this release does not know."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO schema_version (version, name, compatible)"
            " VALUES (99, 'from_the_future', $1)",
            compatible,
        )
    finally:
        await conn.close()


def test_the_compatibility_migration_declares_itself_compatible() -> None:
    [marked] = [m for m in migrations() if m.name == "schema_compatibility"]
    assert marked.compatible
    assert marked.sql.startswith(COMPATIBLE_MARK)
    assert not migrations()[0].compatible


async def test_an_unknown_migration_stops_every_command_naming_it(new_db: NewDb, runtime) -> None:
    dsn = await new_db()
    await _migrated(dsn)
    await _future_migration(dsn, compatible=False)
    env = cli_env(runtime, dsn)
    for command in (("migrate",), ("tenants", "create", "acme")):
        code, _, err = await asyncio.wait_for(run_cli(*command, env=env), 120)
        assert code == 2, (command, err)
        assert "0099_from_the_future" in err and "does not know" in err, err
    code, out, err = await run_cli("migrate", "--status", env=env)
    assert code == 0, err
    assert "0099  from_the_future" in out and "applied, unknown to this release" in out
    assert f"{len(migrations())} applied, 0 pending, 1 unknown to this release" in out


async def test_an_unknown_compatible_migration_warns_and_runs(new_db: NewDb, runtime) -> None:
    dsn = await new_db()
    await _migrated(dsn)
    await _future_migration(dsn, compatible=True)
    env = cli_env(runtime, dsn)
    code, out, err = await run_cli("tenants", "create", "acme", env=env)
    assert code == 0, err
    assert "0099_from_the_future" in err and "declared compatible" in err
    code, out, _ = await run_cli("migrate", "--status", env=env)
    assert "unknown to this release, declared compatible" in out


async def test_migrate_off_refuses_a_missing_migration_and_changes_nothing(
    new_db: NewDb, runtime
) -> None:
    dsn = await new_db()
    await _migrated(dsn, upto=len(migrations()) - 1)
    env = {**cli_env(runtime, dsn), "HOOKRELAY_MIGRATE": "off"}
    code, _, err = await run_cli("tenants", "create", "acme", env=env)
    assert code == 2 and "lacks migrations this release needs" in err, err
    assert f"{migrations()[-1].label}" in err and "hookrelay migrate" in err
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT max(version) FROM schema_version") == (
            len(migrations()) - 1
        )
    finally:
        await conn.close()
    # `hookrelay migrate` is the privileged step, whatever HOOKRELAY_MIGRATE says.
    code, _, err = await run_cli("migrate", env=env)
    assert code == 0, err
    code, _, err = await run_cli("tenants", "create", "acme", env=env)
    assert code == 0, err


async def _dml_only_role(dsn: str) -> tuple[str, str]:
    """A login role that may read and write rows, and change no schema."""
    role = f"hookrelay_dml_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(dsn)
    try:
        database = await conn.fetchval("SELECT current_database()")
        await conn.execute(f"CREATE ROLE {role} LOGIN")
        await conn.execute(f'GRANT CONNECT ON DATABASE "{database}" TO {role}')
        await conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        await conn.execute(f"REVOKE CREATE ON SCHEMA public FROM PUBLIC, {role}")
        await conn.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        )
        await conn.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}")
    finally:
        await conn.close()
    # The same server and query (the embedded server's DSN names its socket directory in
    # ?host= and no host at all), another user.
    parts = urlsplit(dsn)
    netloc = f"{role}@{parts.netloc.rpartition('@')[2]}"
    return role, urlunsplit(parts._replace(netloc=netloc))


async def test_a_dml_only_role_runs_the_service_with_migrate_off(new_db: NewDb, tmp_path) -> None:
    dsn = await new_db()
    await _migrated(dsn)
    role, role_dsn = await _dml_only_role(dsn)
    conn = await asyncpg.connect(role_dsn)
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("CREATE TABLE nope (id int)")
    finally:
        await conn.close()
    env = service_env(
        role_dsn, master_key(), admin_token=ADMIN["Authorization"].split()[1], migrate="off"
    )
    env["HOOKRELAY_DATA_DIR"] = str(tmp_path)
    serve = ServeProcess(env, tmp_path / "serve.log")
    receiver = await Receiver().start()
    try:
        serve.start()
        tenant = serve.tenant()
        async with httpx.AsyncClient(base_url=serve.url, timeout=30) as client:
            r = await client.post(
                "/v1/tasks",
                json={"type": "t", "callbackUrl": receiver.url},
                headers={"Authorization": f"Bearer {tenant['apiKey']}"},
            )
            assert r.status_code == 202, r.text
            task_id = r.json()["id"]
            r = await client.post(
                f"/v1/tasks/{task_id}/complete", json={"status": "succeeded"}, headers=ADMIN
            )
            assert r.status_code == 200, r.text
        await receiver.wait_for(1, timeout=30)
    finally:
        serve.stop()
        await receiver.stop()
        # Roles belong to the server, not the test's database: drop it here.
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f"DROP OWNED BY {role}")
            await conn.execute(f"DROP ROLE {role}")
        finally:
            await conn.close()
    log = (tmp_path / "serve.log").read_text()
    assert "applied migration" not in log
