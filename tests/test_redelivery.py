"""Redelivery and the attempt log, through the HTTP API with a real dispatcher and receiver."""

from __future__ import annotations

import pytest
from aiohttp import web

from hookrelay.outbox.dispatch.dispatcher import running
from tests.receiver import Receiver
from tests.support import ADMIN, bearer, dispatcher, wait_drained

pytestmark = pytest.mark.anyio


async def finished_task(client, tenant, url: str) -> str:
    r = await client.post(
        "/v1/tasks", json={"type": "t", "callbackUrl": url}, headers=bearer(tenant["apiKey"])
    )
    tid = r.json()["id"]
    r = await client.post(f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN)
    assert r.status_code == 200
    return str(tid)


async def test_dead_then_fixed_then_redelivered_with_same_event_id(
    client, tenant, pool, runtime, receiver
) -> None:
    healthy = False

    async def endpoint(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=204 if healthy else 500, text="" if healthy else "down")

    receiver.behaviour = endpoint
    tid = await finished_task(client, tenant, receiver.url)
    key = bearer(tenant["apiKey"])
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
        task = (await client.get(f"/v1/tasks/{tid}", headers=key)).json()
        assert task["delivery"]["status"] == "dead" and task["delivery"]["attempts"] == 3
        healthy = True  # the partner fixed their endpoint
        r = await client.post(f"/v1/tasks/{tid}/redeliver", headers=key)
        assert r.status_code == 202 and r.json()["delivery"]["status"] == "pending"
        await wait_drained(pool)
    task = (await client.get(f"/v1/tasks/{tid}", headers=key)).json()
    assert task["delivery"]["status"] == "delivered" and task["delivery"]["attempts"] == 4
    assert set(receiver.event_ids()) == {task["delivery"]["eventId"]}
    # Three attempts, a dead letter, a redelivery: one body, byte for byte.
    assert len({r.body for r in receiver.received}) == 1
    log = (await client.get(f"/v1/tasks/{tid}/deliveries", headers=key)).json()
    assert log["eventId"] == task["delivery"]["eventId"]
    assert [(a["number"], a["outcome"], a["statusCode"]) for a in log["data"]] == [
        (1, "retry", 500),
        (2, "retry", 500),
        (3, "dead", 500),
        (4, "delivered", 204),
    ]
    assert log["data"][0]["responsePrefix"] == "down" and log["data"][0]["durationMs"] >= 0
    dead = await pool.fetchrow("SELECT replayed_at, replayed_by FROM dead_letters")
    assert dead["replayed_at"] is not None and dead["replayed_by"] == f"tenant:{tenant['id']}"


async def test_redeliver_after_success_sends_again(client, tenant, pool, runtime, receiver) -> None:
    tid = await finished_task(client, tenant, receiver.url)
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
        for sent in (2, 3):
            r = await client.post(f"/v1/tasks/{tid}/redeliver", headers=ADMIN)
            assert r.status_code == 202
            await receiver.wait_for(sent)
            await wait_drained(pool)
    # The delivery summary changed in between; the webhook did not.
    assert len(set(receiver.event_ids())) == 1 and len(receiver.received) == 3
    assert len({r.body for r in receiver.received}) == 1


async def test_redeliver_event_delivered_before_bodies_were_kept(
    client, tenant, pool, runtime, receiver
) -> None:
    # Delivered under the old schema, whose outbox row (and body) left with the
    # delivery: the body is built as the commit would, then stored and reused.
    tid = await finished_task(client, tenant, receiver.url)
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
        first = receiver.received[0].body
        await pool.execute("DELETE FROM events")
        for sent in (2, 3):
            r = await client.post(f"/v1/tasks/{tid}/redeliver", headers=ADMIN)
            assert r.status_code == 202
            await receiver.wait_for(sent)
            await wait_drained(pool)
    assert [r.body for r in receiver.received] == [first] * 3


async def test_redeliver_conflicts_and_404(client, tenant, other_tenant, receiver) -> None:
    key = bearer(tenant["apiKey"])
    r = await client.post("/v1/tasks", json={"type": "t", "callbackUrl": receiver.url}, headers=key)
    live = r.json()["id"]
    r = await client.post(f"/v1/tasks/{live}/redeliver", headers=key)
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_terminal"
    done = await finished_task(client, tenant, receiver.url)  # no dispatcher: still queued
    r = await client.post(f"/v1/tasks/{done}/redeliver", headers=key)
    assert r.status_code == 409 and r.json()["error"]["code"] == "delivery_pending"
    other = bearer(other_tenant["apiKey"])
    assert (await client.post(f"/v1/tasks/{done}/redeliver", headers=other)).status_code == 404
    assert (await client.get(f"/v1/tasks/{done}/deliveries", headers=other)).status_code == 404
    assert (await client.post("/v1/tasks/task_nope/redeliver", headers=key)).status_code == 404
    r = await client.get(f"/v1/tasks/{done}/deliveries", headers=key)
    assert r.status_code == 200 and r.json()["data"] == []
