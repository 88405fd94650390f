"""A partner's own dead letters (/v1/dead-letters): each tenant sees, shows and replays
only its own, with its API key; every replay is audited with the tenant as actor."""

from __future__ import annotations

import pytest

from hookrelay.outbox.dispatch.dispatcher import running
from tests.receiver import failing_until_healthy
from tests.support import ADMIN, bearer, dead_letters_of_two_tenants, dispatcher, wait_drained
from tests.test_console import signed_in

pytestmark = pytest.mark.anyio


@pytest.fixture
async def receiver():
    rx = await failing_until_healthy(503).start()
    yield rx
    await rx.stop()


@pytest.fixture
async def dead(pool, runtime, receiver):
    """Three dead events of tenant A, two of tenant B (a failing receiver)."""
    return await dead_letters_of_two_tenants(pool, runtime, receiver.url)


async def test_each_tenant_lists_only_its_own(client, dead) -> None:
    (a, a_events), (b, b_events) = dead["a"], dead["b"]
    for tenant, events in ((a, a_events), (b, b_events)):
        r = await client.get("/v1/dead-letters", headers=bearer(tenant.api_key))
        assert r.status_code == 200
        assert {d["eventId"] for d in r.json()["data"]} == set(events)
        assert {d["tenantId"] for d in r.json()["data"]} == {tenant.id}
    # The admin's tenant filter is no parameter here: a partner cannot widen its view.
    r = await client.get("/v1/dead-letters", params={"tenant": b.id}, headers=bearer(a.api_key))
    assert {d["eventId"] for d in r.json()["data"]} == set(a_events)
    seen, cursor = [], None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        r = await client.get("/v1/dead-letters", params=params, headers=bearer(a.api_key))
        seen += [d["eventId"] for d in r.json()["data"]]
        if not (cursor := r.json()["nextCursor"]):
            break
    assert sorted(seen) == sorted(a_events)
    key = bearer(a.api_key)
    later = {"since": "2999-01-01T00:00:00Z"}
    assert (await client.get("/v1/dead-letters", params=later, headers=key)).json()["data"] == []
    other = {"eventType": "task.failed"}
    assert (await client.get("/v1/dead-letters", params=other, headers=key)).json()["data"] == []
    until = {"until": "2999-01-01T00:00:00Z", "eventType": "task.succeeded"}
    assert (
        len((await client.get("/v1/dead-letters", params=until, headers=key)).json()["data"]) == 3
    )


async def test_bad_input_unknown_ids_and_wrong_credentials(client, dead) -> None:
    (a, a_events), (b, b_events) = dead["a"], dead["b"]
    key = bearer(a.api_key)
    for params in ({"since": "yesterday"}, {"limit": "0"}, {"limit": "x"}, {"cursor": "%%%"}):
        r = await client.get("/v1/dead-letters", params=params, headers=key)
        assert r.status_code == 400 and set(r.json()) == {"error"}, params
    assert (await client.get("/v1/dead-letters")).status_code == 401
    assert (await client.get("/v1/dead-letters", headers=bearer("hr_wrong"))).status_code == 401
    # The admin token is no tenant: these routes are the partner's.
    r = await client.get("/v1/dead-letters", headers=ADMIN)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    for path in (f"/v1/dead-letters/{b_events[0]}", "/v1/dead-letters/evt_nope"):
        r = await client.get(path, headers=key)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", path
        r = await client.post(f"{path}/replay", headers=key)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", path
    r = await client.post(
        f"/v1/dead-letters/{a_events[0]}/replay", json={"reason": " "}, headers=key
    )
    assert r.status_code == 422
    r = await client.post("/v1/dead-letters/replay", json={"tenant": b.id}, headers=key)
    assert r.status_code == 422  # an unknown field, not a way into another tenant's
    r = await client.post("/v1/dead-letters/replay", params={"dryRun": "maybe"}, headers=key)
    assert r.status_code == 400
    r = await client.post("/v1/dead-letters/replay", json={"since": "soon"}, headers=key)
    assert r.status_code == 422
    assert (await client.post("/v1/dead-letters/replay", headers=ADMIN)).status_code == 403
    # Nothing of B's moved.
    r = await client.get("/v1/dead-letters", headers=bearer(b.api_key))
    assert {d["eventId"] for d in r.json()["data"]} == set(b_events)


async def test_show_own_with_attempts(client, dead) -> None:
    a, [event_id, *_] = dead["a"]
    r = await client.get(f"/v1/dead-letters/{event_id}", headers=bearer(a.api_key))
    body = r.json()
    assert r.status_code == 200 and body["eventId"] == event_id and body["tenantId"] == a.id
    assert [x["number"] for x in body["attemptHistory"]] == [1, 2, 3]
    assert body["replayedAt"] is None


async def test_replay_one_same_event_id_same_body_fresh_budget_audited(
    client, pool, runtime, dead, receiver
) -> None:
    (a, [event_id, *_]), (_, b_events) = dead["a"], dead["b"]
    first = [r.body for r in receiver.received if r.headers["webhook-id"] == event_id]
    receiver.state["healthy"]["ok"] = True
    before = len(receiver.received)
    key = bearer(a.api_key)
    r = await client.post(
        f"/v1/dead-letters/{event_id}/replay", json={"reason": "fixed our endpoint"}, headers=key
    )
    assert r.status_code == 202 and r.json() == {"replayed": 1, "eventId": event_id}
    again = await client.post(f"/v1/dead-letters/{event_id}/replay", headers=key)
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_replayed"
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
    [sent] = receiver.received[before:]
    assert sent.headers["webhook-id"] == event_id
    assert {sent.body} == set(first)  # byte-identical to every earlier attempt
    # A fresh budget: the attempt numbers go on from the log, delivered at the first try.
    outcomes = await pool.fetch(
        "SELECT number, outcome FROM delivery_attempts WHERE event_id = $1 ORDER BY number",
        event_id,
    )
    assert [tuple(o) for o in outcomes][-1] == (4, "delivered")
    letter = await pool.fetchrow("SELECT * FROM dead_letters WHERE event_id = $1", event_id)
    assert letter["replayed_by"] == f"tenant:{a.id}" and letter["replay_count"] == 1
    row = await pool.fetchrow("SELECT * FROM ops_audit")
    assert (row["actor"], row["action"], row["count"]) == (f"tenant:{a.id}", "replay", 1)
    assert row["reason"] == "fixed our endpoint" and event_id in row["filter"]
    # The console's audit view shows the tenant as the actor.
    await signed_in(client)
    audit = await client.get("/ops/audit")
    assert f"tenant:{a.id}" in audit.text and "fixed our endpoint" in audit.text
    assert await pool.fetchval(
        "SELECT count(*) FROM dead_letters WHERE replayed_at IS NULL AND event_id = ANY($1)",
        b_events,
    ) == len(b_events)


async def test_bulk_replay_dry_run_then_only_own(client, pool, runtime, dead, receiver) -> None:
    (a, a_events), (b, b_events) = dead["a"], dead["b"]
    key = bearer(a.api_key)
    r = await client.post("/v1/dead-letters/replay", params={"dryRun": "true"}, headers=key)
    assert r.status_code == 200 and r.json() == {"replayed": 3}
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0  # a dry run moves nothing
    none = {"eventType": "task.failed"}
    r = await client.post("/v1/dead-letters/replay", json=none, headers=key)
    assert r.status_code == 200 and r.json() == {"replayed": 0}
    receiver.state["healthy"]["ok"] = True
    r = await client.post(
        "/v1/dead-letters/replay",
        params={"until": "2999-01-01T00:00:00Z"},
        json={"eventType": "task.succeeded"},
        headers=key,
    )
    assert r.status_code == 202 and r.json() == {"replayed": 3}
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
    delivered = await pool.fetch(
        "SELECT DISTINCT event_id FROM delivery_attempts WHERE outcome = 'delivered'"
    )
    assert {d["event_id"] for d in delivered} == set(a_events)
    r = await client.get("/v1/dead-letters", headers=bearer(b.api_key))
    assert {d["eventId"] for d in r.json()["data"]} == set(b_events)
    assert (await client.get("/v1/dead-letters", headers=key)).json()["data"] == []
    # Audited like ops' replays: the one that found nothing too.
    rows = await pool.fetch("SELECT * FROM ops_audit ORDER BY id")
    assert [(x["actor"], x["action"], x["count"]) for x in rows] == [
        (f"tenant:{a.id}", "bulk_replay", 0),
        (f"tenant:{a.id}", "bulk_replay", 3),
    ]
    row = rows[-1]
    assert a.id in row["filter"] and "task.succeeded" in row["filter"]
