"""v1a tenants end to end: creation, GET /v1/signing-keys, delivery verified by libsodium,
rotation overlap, and the private key encrypted at rest."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tasks.transitions import complete_task
from hookrelay.outbox.tenants import active_secrets
from tests.support import ADMIN, bearer, dispatcher
from tests.test_ed25519 import nacl_verify

pytestmark = pytest.mark.anyio


async def new_tenant(client: httpx.AsyncClient, scheme: str) -> dict[str, Any]:
    r = await client.post(
        "/v1/admin/tenants", json={"name": "acme", "signatureScheme": scheme}, headers=ADMIN
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


async def send_one(pool, runtime, tenant_id: str, url: str) -> None:
    async with pool.acquire() as conn:
        task, _ = await create_task(conn, tenant_id, NewTask(type="t", callback_url=url))
        await complete_task(conn, task.id, "succeeded", result={"ok": True})


async def test_v1a_tenant_creation_and_keys(client, pool, runtime) -> None:
    t = await new_tenant(client, "v1a")
    assert t["signatureScheme"] == "v1a" and t["signingSecret"] is None
    assert t["publicKey"].startswith("whpk_")
    r = await client.get("/v1/signing-keys", headers=bearer(t["apiKey"]))
    assert r.status_code == 200
    body = r.json()
    assert body["signatureScheme"] == "v1a"
    assert [(k["scheme"], k["publicKey"], k["expiresAt"]) for k in body["data"]] == [
        ("v1a", t["publicKey"], None)
    ]
    # The private key is stored only encrypted: the row holds no whsk_ text.
    rows = await pool.fetch("SELECT * FROM signing_secrets WHERE tenant_id = $1", t["id"])
    assert len(rows) == 1 and rows[0]["scheme"] == "v1a"
    assert b"whsk_" not in bytes(rows[0]["secret_enc"])
    async with pool.acquire() as conn:
        found = (await active_secrets(conn, [t["id"]], runtime.secret_box))[t["id"]]
    assert found.values == [] and len(found.keys) == 1 and found.keys[0].startswith("whsk_")
    assert found.keys[0].removeprefix("whsk_") not in str(dict(rows[0]))


async def test_v1_tenant_lists_no_secret(client, tenant) -> None:
    assert tenant["signatureScheme"] == "v1" and tenant["publicKey"] is None
    r = await client.get("/v1/signing-keys", headers=bearer(tenant["apiKey"]))
    assert r.status_code == 200
    [key] = r.json()["data"]
    assert key["scheme"] == "v1" and "publicKey" not in key
    assert tenant["signingSecret"] not in r.text


async def test_signing_keys_auth(client) -> None:
    r = await client.get("/v1/signing-keys")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    r = await client.get("/v1/signing-keys", headers=ADMIN)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize("scheme", ["v2", "V1A", 1, None, ""])
async def test_bad_scheme_is_422(client, scheme) -> None:
    r = await client.post(
        "/v1/admin/tenants", json={"name": "a", "signatureScheme": scheme}, headers=ADMIN
    )
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "validation_error"
    assert "signatureScheme" in r.json()["error"]["message"]


async def test_v1a_webhook_verifies_with_published_key(client, pool, runtime, receiver) -> None:
    t = await new_tenant(client, "v1a")
    keys = (await client.get("/v1/signing-keys", headers=bearer(t["apiKey"]))).json()["data"]
    async with running(dispatcher(runtime, pool)):
        await send_one(pool, runtime, t["id"], receiver.url)
        await receiver.wait_for(1)
    got = receiver.received[0]
    [entry] = got.headers["webhook-signature"].split(" ")
    nacl_verify(
        keys[0]["publicKey"],
        got.headers["webhook-id"],
        int(got.headers["webhook-timestamp"]),
        got.body,
        entry,
    )


async def test_both_carries_v1_and_v1a(client, pool, runtime, receiver) -> None:
    t = await new_tenant(client, "both")
    async with running(dispatcher(runtime, pool)):
        await send_one(pool, runtime, t["id"], receiver.url)
        await receiver.wait_for(1)
    got = receiver.received[0]
    v1, v1a = got.headers["webhook-signature"].split(" ")
    assert v1.startswith("v1,") and v1a.startswith("v1a,")
    # The reference verifier accepts the v1 part and skips the v1a one.
    Webhook(t["signingSecret"]).verify(got.body, got.headers)
    ts = int(got.headers["webhook-timestamp"])
    nacl_verify(t["publicKey"], got.headers["webhook-id"], ts, got.body, v1a)


async def test_v1a_rotation_overlaps(client, pool, runtime, receiver) -> None:
    t = await new_tenant(client, "v1a")
    r = await client.post(f"/v1/admin/tenants/{t['id']}/rotate-secret", headers=ADMIN)
    assert r.status_code == 200
    rotated = r.json()
    assert rotated["signingSecret"] is None and rotated["publicKey"].startswith("whpk_")
    assert rotated["publicKey"] != t["publicKey"]
    keys = (await client.get("/v1/signing-keys", headers=bearer(t["apiKey"]))).json()["data"]
    assert [k["publicKey"] for k in keys] == [rotated["publicKey"], t["publicKey"]]
    assert keys[0]["expiresAt"] is None and keys[1]["expiresAt"] is not None
    async with running(dispatcher(runtime, pool)):
        await send_one(pool, runtime, t["id"], receiver.url)
        await receiver.wait_for(1)
    got = receiver.received[0]
    new, old = got.headers["webhook-signature"].split(" ")
    ts, wid = int(got.headers["webhook-timestamp"]), got.headers["webhook-id"]
    nacl_verify(rotated["publicKey"], wid, ts, got.body, new)
    nacl_verify(t["publicKey"], wid, ts, got.body, old)
