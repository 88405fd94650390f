"""Tenant administration and health routes."""

from __future__ import annotations

import base64

import asyncpg
import pytest

from outbox.tenants import active_secrets, hash_api_key

from .conftest import ADMIN, bearer

pytestmark = pytest.mark.anyio


async def test_create_tenant_shows_credentials_once(client, pool, runtime) -> None:  # type: ignore[no-untyped-def]
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
async def test_create_tenant_validation(client, body) -> None:  # type: ignore[no-untyped-def]
    r = await client.post("/v1/admin/tenants", json=body, headers=ADMIN)
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"


async def test_create_tenant_needs_admin(client, tenant) -> None:  # type: ignore[no-untyped-def]
    r = await client.post("/v1/admin/tenants", json={"name": "x"}, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 403
    r = await client.post("/v1/admin/tenants", json={"name": "x"}, headers=bearer("hra_wrong"))
    assert r.status_code == 401


async def test_rotate_secret(client, tenant, pool, runtime) -> None:  # type: ignore[no-untyped-def]
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


async def test_rotate_with_zero_overlap_drops_old_secret(pool: asyncpg.Pool, runtime) -> None:  # type: ignore[no-untyped-def]
    from outbox.tenants import create_tenant, rotate_secret

    async with pool.acquire() as conn:
        t = await create_tenant(conn, "z", runtime.secret_box)
        new = await rotate_secret(conn, t.id, runtime.secret_box, 0)
        assert (await active_secrets(conn, [t.id], runtime.secret_box))[t.id].values == [new]


async def test_healthz_and_readyz(client) -> None:  # type: ignore[no-untyped-def]
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    r = await client.get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


async def test_readyz_reports_unreachable_database(client, pool) -> None:  # type: ignore[no-untyped-def]
    await pool.close()
    r = await client.get("/readyz")
    assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
