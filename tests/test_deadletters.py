"""Dead letters for ops: list and filter, show with history, replay one, replay in bulk."""

from __future__ import annotations

import asyncio

import pytest

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.models import EventId
from hookrelay.outbox.ops.dead_letters import DeadLetterFilter, replay_batch
from tests.receiver import failing_until_healthy
from tests.support import ADMIN, bearer, dead_letters_of_two_tenants, dispatcher, wait_drained

pytestmark = pytest.mark.anyio


@pytest.fixture
async def receiver():
    rx = await failing_until_healthy(503).start()
    yield rx
    await rx.stop()


@pytest.fixture
async def dead(pool, runtime, receiver):
    """Three dead events of tenant A, two of tenant B."""
    return await dead_letters_of_two_tenants(pool, runtime, receiver.url)


async def test_list_filter_and_paginate(client, dead) -> None:
    a, a_events = dead["a"]
    r = await client.get("/v1/admin/dead-letters", headers=ADMIN)
    assert r.status_code == 200 and len(r.json()["data"]) == 5
    r = await client.get("/v1/admin/dead-letters", params={"tenant": a.id}, headers=ADMIN)
    assert {d["eventId"] for d in r.json()["data"]} == set(a_events)
    seen, cursor = [], None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/admin/dead-letters", params=params, headers=ADMIN)).json()
        seen += [d["eventId"] for d in page["data"]]
        if not (cursor := page["nextCursor"]):
            break
    assert len(seen) == len(set(seen)) == 5
    first = (await client.get("/v1/admin/dead-letters", headers=ADMIN)).json()["data"][0]
    r = await client.get(
        "/v1/admin/dead-letters", headers=ADMIN, params={"since": "2999-01-01T00:00:00Z"}
    )
    assert r.json()["data"] == []
    r = await client.get(
        "/v1/admin/dead-letters",
        headers=ADMIN,
        params={"until": first["failedAt"], "eventType": "task.succeeded"},
    )
    assert r.json()["data"] == []
    assert first["lastStatusCode"] == 503 and first["attempts"] == 3


async def test_show_with_history(client, dead) -> None:
    _, [event_id, *_] = dead["a"]
    r = await client.get(f"/v1/admin/dead-letters/{event_id}", headers=ADMIN)
    body = r.json()
    assert r.status_code == 200 and body["eventId"] == event_id and body["replayedAt"] is None
    assert [a["number"] for a in body["attemptHistory"]] == [1, 2, 3]
    assert (await client.get("/v1/admin/dead-letters/evt_nope", headers=ADMIN)).status_code == 404


async def test_replay_after_recovery_delivers_original_event_id(
    client, dead, pool, runtime, receiver
) -> None:
    a, [event_id, *_] = dead["a"]
    receiver.state["healthy"]["ok"] = True
    before = len(receiver.received)
    r = await client.post(f"/v1/admin/dead-letters/{event_id}/replay", headers=ADMIN)
    assert r.status_code == 202 and r.json() == {"replayed": 1, "eventId": event_id}
    again = await client.post(f"/v1/admin/dead-letters/{event_id}/replay", headers=ADMIN)
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_replayed"
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
    assert receiver.event_ids()[before:] == [event_id]
    task = await pool.fetchrow("SELECT * FROM tasks WHERE event_id = $1", event_id)
    assert task["delivery_status"] == "delivered" and task["delivery_attempts"] == 4
    shown = (await client.get(f"/v1/admin/dead-letters/{event_id}", headers=ADMIN)).json()
    assert shown["replayedBy"] == "admin" and shown["replayedAt"]
    assert [h["outcome"] for h in shown["attemptHistory"]] == [
        "retry",
        "retry",
        "dead",
        "delivered",
    ]
    listed = (await client.get("/v1/admin/dead-letters", headers=ADMIN)).json()["data"]
    assert event_id not in {d["eventId"] for d in listed}


async def test_concurrent_replays_create_one_outbox_row(pool, dead) -> None:
    _, [event_id, *_] = dead["a"]

    async def replay() -> list[EventId]:
        async with pool.acquire() as conn:
            return await replay_batch(conn, DeadLetterFilter(event_id=event_id), by="x")

    results = await asyncio.gather(*(replay() for _ in range(10)))
    assert sum(len(r) for r in results) == 1
    assert await pool.fetchval("SELECT count(*) FROM outbox WHERE event_id=$1", event_id) == 1


async def test_bulk_replay_touches_only_matching(client, dead, pool) -> None:
    b, b_events = dead["b"]
    r = await client.post("/v1/admin/dead-letters/replay", json={"tenant": b.id}, headers=ADMIN)
    assert r.status_code == 202 and r.json() == {"replayed": 2}
    queued = {r["event_id"] for r in await pool.fetch("SELECT event_id FROM outbox")}
    assert queued == set(b_events)
    r = await client.post("/v1/admin/dead-letters/replay", json={"tenant": b.id}, headers=ADMIN)
    assert r.json() == {"replayed": 0}
    r = await client.post("/v1/admin/dead-letters/replay", json={"bogus": 1}, headers=ADMIN)
    assert r.status_code == 422


async def test_dead_letter_routes_need_admin(client, tenant) -> None:
    for method, path in [
        ("GET", "/v1/admin/dead-letters"),
        ("GET", "/v1/admin/dead-letters/e"),
        ("POST", "/v1/admin/dead-letters/e/replay"),
        ("POST", "/v1/admin/dead-letters/replay"),
    ]:
        assert (
            await client.request(method, path, headers=bearer(tenant["apiKey"]))
        ).status_code == 403
        assert (await client.request(method, path)).status_code == 401


async def test_bulk_replay_is_a_snapshot(client, dead, pool, monkeypatch) -> None:
    """Letters that die again while a bulk replay runs are not replayed twice by it."""
    from hookrelay.outbox.ops.requeue import put_back as original

    calls: list[int] = []

    async def put_back_then_die_again(conn, queued, **kw):
        done = await original(conn, queued, **kw)
        calls.append(len(done))
        if len(calls) == 1:  # the receiver answers 410 at once: each dies again
            await conn.execute("DELETE FROM outbox WHERE event_id = ANY($1::text[])", done)
            await conn.execute(
                "UPDATE dead_letters SET replayed_at = NULL, replayed_by = NULL,"
                " failed_at = clock_timestamp() WHERE event_id = ANY($1::text[])",
                done,
            )
        return done

    monkeypatch.setattr("hookrelay.outbox.ops.dead_letters.put_back", put_back_then_die_again)
    r = await client.post("/v1/admin/dead-letters/replay", headers=ADMIN)
    assert r.status_code == 202 and r.json() == {"replayed": 5}
    assert sum(calls) == 5
    # The next call sees the letters that died again.
    monkeypatch.setattr("hookrelay.outbox.ops.dead_letters.put_back", original)
    r = await client.post("/v1/admin/dead-letters/replay", headers=ADMIN)
    assert r.json() == {"replayed": 5}


async def test_api_replays_are_audited(client, pool, dead) -> None:
    a, a_events = dead["a"]
    r = await client.post(
        f"/v1/admin/dead-letters/{a_events[0]}/replay",
        json={"reason": "partner asked (T-1)"},
        headers=ADMIN,
    )
    assert r.status_code == 202
    r = await client.post("/v1/admin/dead-letters/replay", json={"tenant": a.id}, headers=ADMIN)
    assert r.status_code == 202 and r.json()["replayed"] == 2
    rows = await pool.fetch(
        "SELECT actor, action, count, filter, reason FROM ops_audit ORDER BY id"
    )
    assert [(r["actor"], r["action"], r["count"], r["reason"]) for r in rows] == [
        ("admin", "replay", 1, "partner asked (T-1)"),
        ("admin", "bulk_replay", 2, "(no reason given)"),
    ]
    assert a_events[0] in rows[0]["filter"] and a.id in rows[1]["filter"]
    bad = await client.post("/v1/admin/dead-letters/replay", json={"reason": 3}, headers=ADMIN)
    assert bad.status_code == 422
