"""Notifications (/v1/notifications): a tenant is told, at a URL of its own, that a
task's webhook died (delivery.dead) or that a host's circuit holds its webhooks
(destination.unhealthy, then destination.recovered, once per episode), each signed
with its secret and sent through the outbox; a dead notification is told to no one."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web
from standardwebhooks import Webhook

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.ops import close_circuit, recent_notifications, set_notifications
from hookrelay.outbox.tenants import create_tenant
from tests.receiver import Receiver, failing_until_healthy
from tests.support import (
    ADMIN,
    backlog,
    bearer,
    dispatcher,
    eventually,
    v1_secret,
    wait_drained,
)
from tests.test_console import signed_in

pytestmark = pytest.mark.anyio
ALL = ["delivery.dead", "destination.unhealthy", "destination.recovered"]


def told(rx: Receiver, kind: str | None = None) -> list[dict[str, Any]]:
    bodies = [json.loads(r.body) for r in rx.received]
    return [b for b in bodies if kind is None or b["type"] == kind]


async def test_put_get_delete_and_refusals(client, tenant, other_tenant, receiver) -> None:
    key = bearer(tenant["apiKey"])
    r = await client.get("/v1/notifications", headers=key)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await client.put("/v1/notifications", json={"url": receiver.url}, headers=key)
    assert r.status_code == 200
    assert r.json()["url"] == receiver.url and r.json()["events"] == ALL
    r = await client.put(
        "/v1/notifications",
        json={"url": receiver.url, "events": ["destination.recovered", "delivery.dead"]},
        headers=key,
    )
    assert r.json()["events"] == ["delivery.dead", "destination.recovered"]
    r = await client.get("/v1/notifications", headers=key)
    assert r.status_code == 200 and r.json()["events"] == ["delivery.dead", "destination.recovered"]
    # Another tenant's settings are its own.
    r = await client.get("/v1/notifications", headers=bearer(other_tenant["apiKey"]))
    assert r.status_code == 404
    refused = [
        ({"url": "ftp://example.com/x"}, 422, "invalid_notification_url"),
        ({"url": "http://10.1.2.3/hook"}, 422, "blocked_notification_url"),
        ({"url": "http://169.254.169.254/latest"}, 422, "blocked_notification_url"),
        ({"url": ""}, 422, "validation_error"),
        ({"url": receiver.url, "events": []}, 422, "validation_error"),
        ({"url": receiver.url, "events": ["task.succeeded"]}, 422, "validation_error"),
        ({"url": receiver.url, "extra": 1}, 422, "validation_error"),
        ({"events": ALL}, 422, "validation_error"),
    ]
    for body, status, code in refused:
        r = await client.put("/v1/notifications", json=body, headers=key)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), body
    r = await client.put("/v1/notifications", content=b"{", headers=key)
    assert r.status_code == 400
    assert (await client.put("/v1/notifications", json={"url": receiver.url})).status_code == 401
    r = await client.put("/v1/notifications", json={"url": receiver.url}, headers=ADMIN)
    assert r.status_code == 403
    r = await client.get("/v1/notifications", headers=bearer("hr_wrong"))
    assert r.status_code == 401
    assert (await client.delete("/v1/notifications", headers=ADMIN)).status_code == 403
    # The refusals changed nothing.
    r = await client.get("/v1/notifications", headers=key)
    assert r.json()["url"] == receiver.url
    assert (await client.delete("/v1/notifications", headers=key)).status_code == 204
    assert (await client.get("/v1/notifications", headers=key)).status_code == 404
    assert (await client.delete("/v1/notifications", headers=key)).status_code == 204


async def test_one_delivery_dead_per_dead_event_signed(client, pool, runtime, receiver) -> None:
    failing = await failing_until_healthy(503, "down").start()
    try:
        async with pool.acquire() as conn:
            a = await create_tenant(conn, "a", runtime.secret_box)
            quiet = await create_tenant(conn, "quiet", runtime.secret_box)
        r = await client.put(
            "/v1/notifications", json={"url": receiver.url}, headers=bearer(a.api_key)
        )
        assert r.status_code == 200
        _, dead = await backlog(pool, runtime, failing.url, 3, a)
        _, others = await backlog(pool, runtime, failing.url, 2, quiet)
        async with running(dispatcher(runtime, pool)):
            await wait_drained(pool)
        notes = told(receiver)
        assert sorted(n["data"]["eventId"] for n in notes) == sorted(dead)
        assert {n["type"] for n in notes} == {"delivery.dead"}
        wh = Webhook(v1_secret(a))
        for got in receiver.received:
            # Verified by the Standard Webhooks library with the tenant's secret.
            payload = wh.verify(got.body, got.headers)
            data = payload["data"]
            task_id = await pool.fetchval(
                "SELECT task_id FROM dead_letters WHERE event_id = $1", data["eventId"]
            )
            assert data["taskId"] == task_id and data["callbackUrl"] == failing.url
            assert data["attempts"] == 3 and data["lastStatusCode"] == 503
            assert "503" in data["lastError"] and data["deadAt"].endswith("Z")
            assert got.headers["webhook-id"].startswith("evt_")
            assert len(got.headers["webhook-id"]) == len("evt_") + 26
        # Each notification is an event of the outbox: logged, and delivered once.
        logged = await pool.fetch(
            "SELECT event_id, outcome FROM delivery_attempts WHERE task_id IS NULL"
        )
        assert sorted(x["event_id"] for x in logged) == sorted(receiver.event_ids())
        assert {x["outcome"] for x in logged} == {"delivered"}
        assert not set(others) & {n["data"]["eventId"] for n in notes}
        # The console shows the URL and the last notifications.
        await signed_in(client)
        page = await client.get(f"/ops/tenants/{a.id}/notifications")
        assert page.status_code == 200 and receiver.url in page.text
        assert all(e in page.text for e in receiver.event_ids()) and "delivered" in page.text
        page = await client.get(f"/ops/tenants/{quiet.id}/notifications")
        assert "No notification URL is set" in page.text
        assert f"/ops/tenants/{a.id}/notifications" in (await client.get("/ops/tenants")).text
    finally:
        await failing.stop()


async def test_a_dead_notification_is_told_to_no_one(pool, runtime) -> None:
    failing = await failing_until_healthy(503).start()
    try:
        async with pool.acquire() as conn:
            a = await create_tenant(conn, "a", runtime.secret_box)
            # The notification URL is as dead as the callback.
            await set_notifications(conn, a.id, failing.url.replace("/hook", "/notify"))
        _, dead = await backlog(pool, runtime, failing.url, 2, a)
        async with running(dispatcher(runtime, pool)):
            await wait_drained(pool)
            await asyncio.sleep(0.3)  # a few polls more: nothing new comes
            assert await pool.fetchval("SELECT count(*) FROM outbox") == 0
        letters = await pool.fetch("SELECT event_id, task_id, event_type FROM dead_letters")
        tasks_dead = [x for x in letters if x["task_id"] is not None]
        notes_dead = [x for x in letters if x["task_id"] is None]
        assert sorted(x["event_id"] for x in tasks_dead) == sorted(dead)
        # One notification per dead task event, dead in its turn, and no more.
        assert len(notes_dead) == 2 and {x["event_type"] for x in notes_dead} == {"delivery.dead"}
        assert await pool.fetchval("SELECT count(*) FROM events WHERE task_id IS NULL") == 2
        async with pool.acquire() as conn:
            sent = await recent_notifications(conn, a.id)
        assert {n.state for n in sent} == {"dead"}
    finally:
        await failing.stop()


async def test_one_unhealthy_recovered_pair_per_episode(client, pool, runtime, receiver) -> None:
    bad = await Receiver().start()
    healthy = {"ok": False}

    async def flaky(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=204 if healthy["ok"] else 500, text="boom")

    bad.behaviour = flaky
    rt = replace(
        runtime,
        settings=replace(
            runtime.settings,
            breaker_threshold=3,
            breaker_probe_s=0.3,
            max_attempts=50,
            retry_base_s=0.05,
            retry_cap_s=0.05,
        ),
    )
    host = f"http://127.0.0.1:{bad.port}"
    try:
        async with pool.acquire() as conn:
            a = await create_tenant(conn, "a", rt.secret_box)
            b = await create_tenant(conn, "b", rt.secret_box)
            bystander = await create_tenant(conn, "c", rt.secret_box)
            for t in (a, b, bystander):
                await set_notifications(conn, t.id, receiver.url)
        _, held_a = await backlog(pool, rt, bad.url, 8, a)
        _, held_b = await backlog(pool, rt, bad.url, 4, b)
        await backlog(pool, rt, receiver.url, 3, bystander)  # to a healthy host only

        async with running(dispatcher(rt, pool)):

            async def both_told() -> bool:
                return len(told(receiver, "destination.unhealthy")) >= 2

            await eventually(both_told, 20)
            await asyncio.sleep(1.0)  # several probes fail meanwhile: nothing more is told
            healthy["ok"] = True
            await wait_drained(pool, timeout=30)

            async def recovered() -> bool:
                return len(told(receiver, "destination.recovered")) >= 2

            await eventually(recovered, 20)
            await asyncio.sleep(0.3)
        unhealthy = told(receiver, "destination.unhealthy")
        back = told(receiver, "destination.recovered")
        assert len(unhealthy) == 2 and len(back) == 2, [n["type"] for n in told(receiver)]
        assert {n["data"]["host"] for n in unhealthy + back} == {host}
        held = {n["data"]["heldDeliveries"] for n in unhealthy}
        assert held <= set(range(1, 9)) and max(held) > 1  # several events, one notice
        for n in unhealthy:
            assert n["data"]["consecutiveFailures"] >= 3 and "500" in n["data"]["lastError"]
            assert n["data"]["since"].endswith("Z")
        # Each signed with its own tenant's secret.
        secrets = {a.id: v1_secret(a), b.id: v1_secret(b)}
        tenants_told = []
        for got in receiver.received:
            tenant_id = await pool.fetchval(
                "SELECT tenant_id FROM events WHERE event_id = $1", got.headers["webhook-id"]
            )
            if json.loads(got.body)["type"].startswith("destination."):
                Webhook(secrets[tenant_id]).verify(got.body, got.headers)
                tenants_told.append(tenant_id)
        assert sorted(tenants_told) == sorted([a.id, a.id, b.id, b.id])
        assert set(held_a + held_b) <= set(bad.event_ids())
        assert await pool.fetchval("SELECT count(*) FROM destination_notices") == 0
    finally:
        await bad.stop()


async def test_an_operator_close_ends_the_episode(pool, runtime, receiver) -> None:
    """A manual close (the console, the CLI) tells the tenants too; a host that never
    held a tenant's webhook tells it nothing."""
    async with pool.acquire() as conn:
        a = await create_tenant(conn, "a", runtime.secret_box)
        await set_notifications(conn, a.id, receiver.url, ["destination.recovered"])
        host = "https://down.example"
        await conn.execute(
            "INSERT INTO destinations (host, state, consecutive_failures, opened_at, last_error)"
            " VALUES ($1, 'open', 7, now(), 'HTTP 502')",
            host,
        )
        await conn.execute(
            "INSERT INTO destination_notices (host, tenant_id) VALUES ($1, $2)", host, a.id
        )
        await conn.execute(
            "INSERT INTO destinations (host, state) VALUES ('https://other.example', 'open')"
        )
    async with pool.acquire() as conn:
        assert await close_circuit(conn, host, actor="ops", reason="fixed")
        assert await close_circuit(conn, "https://other.example", actor="ops", reason="x")
        # destination.unhealthy was not asked for: only the recovery is queued.
        rows = await pool.fetch("SELECT event_type, body FROM events WHERE task_id IS NULL")
    assert [r["event_type"] for r in rows] == ["destination.recovered"]
    data = json.loads(rows[0]["body"])["data"]
    assert data == {
        "host": host,
        "since": data["since"],
        "consecutiveFailures": 7,
        "lastError": "HTTP 502",
        "heldDeliveries": 0,
    }
