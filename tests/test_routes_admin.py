"""Tenant administration and health routes."""

from __future__ import annotations

import base64

import asyncpg
import httpx
import pytest

from hookrelay.outbox.tenants import active_secrets, hash_api_key
from hookrelay.service.server.app import create_app
from tests.support import ADMIN, bearer, eventually, v1_secret

pytestmark = pytest.mark.anyio


async def test_create_tenant_shows_credentials_once(client, pool, runtime) -> None:
    r = await client.post("/v1/admin/tenants", json={"name": "Acme"}, headers=ADMIN)
    assert r.status_code == 201 and r.headers["cache-control"] == "no-store"
    t = r.json()
    assert t["id"].startswith("ten_") and t["name"] == "Acme"
    assert t["signingSecret"].startswith("whsec_")
    assert len(base64.b64decode(t["signingSecret"].removeprefix("whsec_"))) >= 24
    row = await pool.fetchrow("SELECT * FROM tenants WHERE id = $1", t["id"])
    assert row["api_key_hash"] == hash_api_key(t["apiKey"])
    # Neither the key nor the secret is stored in the clear anywhere.
    dump = str([dict(r) for r in await pool.fetch("SELECT * FROM tenants")]) + str(
        [dict(r) for r in await pool.fetch("SELECT * FROM signing_secrets")]
    )
    assert t["apiKey"] not in dump and t["signingSecret"] not in dump
    async with pool.acquire() as conn:
        secrets = await active_secrets(conn, [t["id"]], runtime.secret_box)
    assert secrets[t["id"]].values == [t["signingSecret"]]
    assert secrets[t["id"]].expires_at is None
    r = await client.get("/v1/tasks", headers=bearer(t["apiKey"]))
    assert r.status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": ""},
        {"name": "  "},
        {"name": 3},
        {"name": "x" * 201},
        {"name": "a", "b": 1},
        ["a"],
    ],
)
async def test_create_tenant_validation(client, body) -> None:
    r = await client.post("/v1/admin/tenants", json=body, headers=ADMIN)
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"


async def test_create_tenant_needs_admin(client, tenant) -> None:
    r = await client.post("/v1/admin/tenants", json={"name": "x"}, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 403
    r = await client.post("/v1/admin/tenants", json={"name": "x"}, headers=bearer("hra_wrong"))
    assert r.status_code == 401


async def test_rotate_secret(client, tenant, pool, runtime) -> None:
    r = await client.post(f"/v1/admin/tenants/{tenant['id']}/rotate-secret", headers=ADMIN)
    assert r.status_code == 200
    new = r.json()["signingSecret"]
    assert new.startswith("whsec_") and new != tenant["signingSecret"]
    async with pool.acquire() as conn:
        secrets = await active_secrets(conn, [tenant["id"]], runtime.secret_box)
    assert secrets[tenant["id"]].values == [new, tenant["signingSecret"]]
    assert secrets[tenant["id"]].expires_at is not None
    r = await client.post("/v1/admin/tenants/ten_nope/rotate-secret", headers=ADMIN)
    assert r.status_code == 404


async def test_rotate_with_zero_overlap_drops_old_secret(pool: asyncpg.Pool, runtime) -> None:
    from hookrelay.outbox.tenants import create_tenant, rotate_secret

    async with pool.acquire() as conn:
        t = await create_tenant(conn, "z", runtime.secret_box)
        new = v1_secret(await rotate_secret(conn, t.id, runtime.secret_box, 0))
        assert (await active_secrets(conn, [t.id], runtime.secret_box))[t.id].values == [new]


async def test_healthz_and_readyz(client) -> None:
    from importlib.metadata import version

    # The release, as `hookrelay --version` names it.
    assert (await client.get("/healthz")).json() == {
        "status": "ok",
        "version": version("hookrelay-server"),
    }
    r = await client.get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


async def test_readyz_reports_unreachable_database(client, pool) -> None:
    await pool.close()
    r = await client.get("/readyz")
    assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"


async def test_read_only_server_is_not_ready_and_writes_answer_503(runtime, dsn, pool) -> None:
    """A standby (or a read-only database) answers reads only: /readyz 503, writes 503."""
    from hookrelay.outbox.store.pool import create_pool
    from hookrelay.outbox.tenants import create_tenant

    async with pool.acquire() as conn:
        key = (await create_tenant(conn, "ro", runtime.secret_box)).api_key
        name = await conn.fetchval("SELECT current_database()")
        await conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    read_only = await create_pool(dsn, min_size=1, max_size=2)
    app = create_app(runtime, pool=read_only)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                r = await c.get("/readyz")
                assert r.status_code == 503 and "read-only" in r.json()["error"]["message"]
                r = await c.post(
                    "/v1/tasks",
                    json={"type": "t", "callbackUrl": "http://127.0.0.1:9/"},
                    headers=bearer(key),
                )
                assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
    finally:
        await read_only.close()


async def test_list_tenants_pages_in_creation_order(client) -> None:
    made = []
    for name in ("a", "b", "c"):
        r = await client.post("/v1/admin/tenants", json={"name": name}, headers=ADMIN)
        made.append(r.json()["id"])
    await client.post(f"/v1/admin/tenants/{made[1]}/rotate-secret", headers=ADMIN)
    r = await client.get("/v1/admin/tenants?limit=2", headers=ADMIN)
    assert r.status_code == 200
    page = r.json()
    assert [t["id"] for t in page["data"]] == made[:2] and page["nextCursor"]
    # During the overlap the old secret still signs beside the new one.
    assert [t["secretCount"] for t in page["data"]] == [1, 2]
    assert "apiKey" not in page["data"][0] and page["data"][0]["createdAt"].endswith("Z")
    r = await client.get(f"/v1/admin/tenants?limit=2&cursor={page['nextCursor']}", headers=ADMIN)
    assert [t["id"] for t in r.json()["data"]] == made[2:] and r.json()["nextCursor"] is None


@pytest.mark.parametrize("query", ["limit=0", "limit=x", "limit=1001", "cursor=%21%21"])
async def test_list_tenants_rejects_bad_paging(client, query) -> None:
    r = await client.get(f"/v1/admin/tenants?{query}", headers=ADMIN)
    assert r.status_code == 400 and r.json()["error"]["code"]


async def test_list_tenants_needs_admin(client, tenant) -> None:
    assert (
        await client.get("/v1/admin/tenants", headers=bearer(tenant["apiKey"]))
    ).status_code == 403
    assert (await client.get("/v1/admin/tenants")).status_code == 401


async def test_rotate_key_old_key_stops_at_once_even_cached(client, tenant) -> None:
    old = bearer(tenant["apiKey"])
    assert (await client.get("/v1/tasks", headers=old)).status_code == 200  # now cached
    r = await client.post(f"/v1/admin/tenants/{tenant['id']}/rotate-key", headers=ADMIN)
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    new_key = r.json()["apiKey"]
    assert new_key != tenant["apiKey"]
    assert (await client.get("/v1/tasks", headers=old)).status_code == 401
    assert (await client.get("/v1/tasks", headers=bearer(new_key))).status_code == 200


async def test_rotate_key_reaches_other_api_processes(client, tenant, runtime, pool) -> None:
    # A second app with its own key cache stands for another `hookrelay api`
    # process: only the NOTIFY can tell it the key changed.
    other = create_app(runtime, pool=pool)
    async with other.router.lifespan_context(other):
        transport = httpx.ASGITransport(app=other)
        async with httpx.AsyncClient(transport=transport, base_url="http://other.test") as c2:
            # Connecting clears the cache (notifications may have been missed), so
            # wait for the LISTEN before caching the key there.
            await eventually(lambda: other.state.listener.connected, 5)
            old = bearer(tenant["apiKey"])
            assert (await c2.get("/v1/tasks", headers=old)).status_code == 200  # cached there
            r = await client.post(f"/v1/admin/tenants/{tenant['id']}/rotate-key", headers=ADMIN)
            assert r.status_code == 200

            async def rejected() -> bool:
                return (await c2.get("/v1/tasks", headers=old)).status_code == 401

            # The cache would keep the key for 30 s; the NOTIFY ends it in milliseconds.
            await eventually(rejected, 5)


async def test_rotate_key_unknown_tenant_and_needs_admin(client, tenant) -> None:
    r = await client.post("/v1/admin/tenants/ten_nope/rotate-key", headers=ADMIN)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await client.post(
        f"/v1/admin/tenants/{tenant['id']}/rotate-key", headers=bearer(tenant["apiKey"])
    )
    assert r.status_code == 403
