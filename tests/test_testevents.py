"""Test events: POST /v1/test-events queues a signed ping through the normal outbox
(SSRF checks, retries, attempt log, dead letters); GET /v1/test-events/{id} shows it."""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tasks.transitions import complete_task
from tests.receiver import Receiver
from tests.support import ADMIN, bearer, dispatcher, wait_drained

pytestmark = pytest.mark.anyio


async def ping(client, key: str, url: str):
    return await client.post("/v1/test-events", json={"callbackUrl": url}, headers=bearer(key))


async def test_ping_is_signed_delivered_and_logged(client, pool, runtime, tenant, receiver) -> None:
    r = await ping(client, tenant["apiKey"], receiver.url)
    assert r.status_code == 202, r.text
    event_id = r.json()["eventId"]
    assert event_id.startswith("evt_") and r.json()["status"] == "pending"
    assert r.headers["location"] == f"/v1/test-events/{event_id}"
    row = await pool.fetchrow(
        "SELECT task_id, event_type FROM outbox WHERE event_id = $1", event_id
    )
    assert row["task_id"] is None and row["event_type"] == "ping"
    shown = await client.get(f"/v1/test-events/{event_id}", headers=bearer(tenant["apiKey"]))
    assert shown.json() == {
        "eventId": event_id,
        "type": "ping",
        "status": "pending",
        "attempts": [],
    }
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(1)
        await wait_drained(pool)
    got = receiver.received[0]
    assert got.headers["webhook-id"] == event_id
    # Any Standard Webhooks verifier accepts it, as a task's webhook.
    assert Webhook(tenant["signingSecret"]).verify(got.body, got.headers)["type"] == "ping"
    assert set(json.loads(got.body)) == {"type", "timestamp", "data"}
    shown = (
        await client.get(f"/v1/test-events/{event_id}", headers=bearer(tenant["apiKey"]))
    ).json()
    assert shown["status"] == "delivered"
    [attempt] = shown["attempts"]
    assert attempt["outcome"] == "delivered" and attempt["statusCode"] == 204


async def test_failing_ping_retries_then_dead_letters_and_replays(
    client, pool, runtime, tenant
) -> None:
    healthy = {"ok": False}

    async def endpoint(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=204 if healthy["ok"] else 500)

    rx = await Receiver(behaviour=endpoint).start()
    try:
        event_id = (await ping(client, tenant["apiKey"], rx.url)).json()["eventId"]
        async with running(dispatcher(runtime, pool)):
            await wait_drained(pool)
        url = f"/v1/test-events/{event_id}"
        shown = (await client.get(url, headers=bearer(tenant["apiKey"]))).json()
        assert shown["status"] == "dead"
        # The settings' attempt budget (3), each logged.
        assert [a["outcome"] for a in shown["attempts"]] == ["retry", "retry", "dead"]
        assert {a["statusCode"] for a in shown["attempts"]} == {500}
        letter = await client.get(f"/v1/admin/dead-letters/{event_id}", headers=ADMIN)
        assert letter.status_code == 200
        assert letter.json()["taskId"] is None and len(letter.json()["attemptHistory"]) == 3
        healthy["ok"] = True
        r = await client.post(f"/v1/admin/dead-letters/{event_id}/replay", headers=ADMIN)
        assert r.status_code == 202
        assert (await client.get(url, headers=bearer(tenant["apiKey"]))).json()[
            "status"
        ] == "pending"
        async with running(dispatcher(runtime, pool)):
            await wait_drained(pool)
        shown = (await client.get(url, headers=bearer(tenant["apiKey"]))).json()
        assert shown["status"] == "delivered" and len(shown["attempts"]) == 4
        assert len({r.headers["webhook-id"] for r in rx.received}) == 1
    finally:
        await rx.stop()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"callbackUrl": "http://10.0.0.1/hook"}, 422, "blocked_callback_url"),
        ({"callbackUrl": "http://169.254.169.254/latest"}, 422, "blocked_callback_url"),
        ({"callbackUrl": "ftp://example.com/x"}, 422, "invalid_callback_url"),
        ({"callbackUrl": ""}, 422, "invalid_callback_url"),
        ({"callbackUrl": 5}, 422, "invalid_callback_url"),
        ({}, 422, "invalid_callback_url"),
        ({"callbackUrl": "http://127.0.0.1/x", "extra": 1}, 422, "validation_error"),
        (["http://127.0.0.1/x"], 422, "validation_error"),
    ],
)
async def test_bad_input_is_refused_with_the_error_shape(
    client, pool, tenant, body, status, code
) -> None:
    r = await client.post("/v1/test-events", json=body, headers=bearer(tenant["apiKey"]))
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code and r.json()["error"]["message"]
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0


async def test_malformed_and_missing_bodies(client, tenant) -> None:
    h = {**bearer(tenant["apiKey"]), "content-type": "application/json"}
    r = await client.post("/v1/test-events", content=b"{nope", headers=h)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = await client.post("/v1/test-events", content=b"", headers=h)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = await client.post(
        "/v1/test-events", content=b"x=1", headers={**h, "content-type": "text/plain"}
    )
    assert r.status_code == 415


async def test_auth_and_visibility(client, pool, runtime, tenant, other_tenant, receiver) -> None:
    assert (
        await client.post("/v1/test-events", json={"callbackUrl": receiver.url})
    ).status_code == 401
    r = await client.post("/v1/test-events", json={"callbackUrl": receiver.url}, headers=ADMIN)
    assert r.status_code == 403
    event_id = (await ping(client, tenant["apiKey"], receiver.url)).json()["eventId"]
    # Another tenant's test event, an unknown id, and a task's event are all 404.
    r = await client.get(f"/v1/test-events/{event_id}", headers=bearer(other_tenant["apiKey"]))
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await client.get("/v1/test-events/evt_nope", headers=bearer(tenant["apiKey"]))
    assert r.status_code == 404
    # A task's event of the same tenant is no test event, pending or delivered.
    async with pool.acquire() as conn:
        task, _ = await create_task(
            conn, tenant["id"], NewTask(type="t", callback_url=receiver.url)
        )
        task_event = (await complete_task(conn, task.id, "succeeded")).event_id
    r = await client.get(f"/v1/test-events/{task_event}", headers=bearer(tenant["apiKey"]))
    assert r.status_code == 404
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
    r = await client.get(f"/v1/test-events/{task_event}", headers=bearer(tenant["apiKey"]))
    assert r.status_code == 404
    r = await client.get(f"/v1/test-events/{event_id}", headers=bearer(tenant["apiKey"]))
    assert r.status_code == 200 and r.json()["status"] == "delivered"
