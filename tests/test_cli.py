"""The ``hookrelay`` command as a user runs it: a subprocess against a real database."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from outbox.db import apply_schema
from outbox.tenants import active_secrets, authenticate

from .support import cli_env, run_cli

pytestmark = pytest.mark.anyio


async def test_tenants_create_prints_working_credentials(pool, runtime, dsn) -> None:
    code, out, err = await run_cli("tenants", "create", "acme", "--json", env=cli_env(runtime, dsn))
    assert code == 0, err
    t = json.loads(out)
    assert t["name"] == "acme" and t["signingSecret"].startswith("whsec_")
    async with pool.acquire() as conn:
        assert await authenticate(conn, t["apiKey"]) == t["id"]
        found = await active_secrets(conn, [t["id"]], runtime.secret_box)
        assert found[t["id"]].values == [t["signingSecret"]]
    code, out, _ = await run_cli("tenants", "create", "globex", env=cli_env(runtime, dsn))
    assert code == 0 and "api key:" in out and "whsec_" in out


async def test_migrate_twice_and_concurrently_is_harmless(runtime, dsn) -> None:
    code, _, err = await run_cli("migrate", env=cli_env(runtime, dsn))
    assert code == 0, err
    conn = await asyncpg.connect(dsn)
    try:
        results = await asyncio.gather(
            apply_schema(conn), *[run_cli("migrate", env=cli_env(runtime, dsn)) for _ in range(3)]
        )
        assert all(r is not None and r[0] == 0 for r in results[1:]), results
        assert await conn.fetchval("SELECT count(*) FROM tasks") == 0
    finally:
        await conn.close()


async def test_unreachable_database_fails_with_clear_message(runtime) -> None:
    env = {**cli_env(runtime, "postgresql://postgres@127.0.0.1:1/none"), "HOOKRELAY_DB_WAIT_S": "1"}
    code, _, err = await run_cli("migrate", env=env)
    assert code == 1 and "database not reachable after 1s" in err
    assert "Traceback" not in err


async def test_bad_setting_fails_before_starting(runtime, dsn) -> None:
    env = {**cli_env(runtime, dsn), "HOOKRELAY_MAX_ATTEMPTS": "many"}
    code, _, err = await run_cli("serve", env=env)
    assert code == 2 and "HOOKRELAY_MAX_ATTEMPTS='many'" in err and "Traceback" not in err


async def test_dead_letters_cli_session(pool, runtime, dsn) -> None:
    from aiohttp import web

    from outbox.dispatcher import running

    from .receiver import Receiver
    from .support import backlog, dispatcher, wait_drained

    async def down(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=500)

    rx = await Receiver(behaviour=down).start()
    try:
        tenant, events = await backlog(pool, runtime, rx.url, 3)
        async with running(dispatcher(runtime, pool)):
            await wait_drained(pool)
    finally:
        await rx.stop()
    env = cli_env(runtime, dsn)
    code, out, err = await run_cli("dead-letters", "list", "--tenant", tenant.id, env=env)
    assert code == 0, err
    assert "eventId" in out and all(e in out for e in events) and "3 dead letter(s)" in out
    code, out, _ = await run_cli("dead-letters", "list", "--json", env=env)
    assert {json.loads(line)["eventId"] for line in out.splitlines()} == set(events)
    code, out, _ = await run_cli("dead-letters", "show", events[0], env=env)
    assert code == 0 and len(json.loads(out)["attemptHistory"]) == 3
    code, out, _ = await run_cli(
        "dead-letters", "replay", "--all", "--tenant", tenant.id, "--dry-run", env=env
    )
    assert "would replay 3" in out and await pool.fetchval("SELECT count(*) FROM outbox") == 0
    code, out, _ = await run_cli("dead-letters", "replay", events[0], env=env)
    assert code == 0 and f"replayed {events[0]}" in out
    code, out, err = await run_cli(
        "dead-letters", "replay", "--all", "--since", "2000-01-01T00:00:00Z", env=env
    )
    assert code == 0 and "replayed 2 dead letter(s)" in out and "2/2" in err
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 3
    code, _, err = await run_cli("dead-letters", "replay", events[0], env=env)
    assert code == 1 and "already replayed" in err
    code, _, err = await run_cli("dead-letters", "show", "evt_nope", env=env)
    assert code == 1 and "not found" in err
    code, _, err = await run_cli("dead-letters", "list", "--since", "noon", env=env)
    assert code == 2 and "ISO-8601" in err
