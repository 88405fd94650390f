"""HTTP routes on /v1/tasks: happy paths and every error case, through the real app and database."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.support import ADMIN, bearer, eventually

pytestmark = pytest.mark.anyio
HOOK = "http://127.0.0.1:9/hook"


async def submit(client: httpx.AsyncClient, key: str, **extra: Any) -> httpx.Response:
    body = {"type": "render", "callbackUrl": HOOK, "input": {"n": 1}, **extra}
    return await client.post("/v1/tasks", json=body, headers=bearer(key))


async def test_submit_returns_202_with_location(client, tenant) -> None:
    r = await submit(client, tenant["apiKey"], metadata={"order": "A-1"}, timeoutSeconds=60)
    assert r.status_code == 202, r.text
    task = r.json()
    assert task["id"].startswith("task_") and len(task["id"]) == 31
    assert r.headers["location"] == f"/v1/tasks/{task['id']}"
    assert r.headers["retry-after"] == "1"
    assert task["status"] == "queued" and task["version"] == 1
    assert task["metadata"] == {"order": "A-1"} and task["input"] == {"n": 1}
    assert task["callbackUrl"] == HOOK and task["timeoutAt"] is not None
    assert task["delivery"] == {
        "eventId": None,
        "status": "none",
        "attempts": 0,
        "lastAttemptAt": None,
        "lastStatusCode": None,
        "lastError": None,
        "nextAttemptAt": None,
        "deliveredAt": None,
    }


# A submit of every optional field, each filled.
FULL_SUBMIT: dict[str, Any] = {
    "metadata": {"order": "A-1", "tags": ["x", "y"], "n": 1.5},
    "timeoutSeconds": 60.123457,
    "heartbeatTimeoutSeconds": 12.5,
    "onTimeout": {"result": {"decision": "rejected"}, "error": {"code": "late"}},
    "callbackHeaders": {"x-api-key": "k-1", "x-team": "blue"},
    "orderingKey": "customer-9",
}


# Values jsonb stores in a form of its own: keys reordered, numbers normalized.
JSONB_FORMS: dict[str, Any] = {
    "input": {
        "zz": 1,
        "a": [1e16, -0.0, 1.2345678901234567e25, 10**30, 0.1],
        "b": {"y": 1, "x": 2},
    },
    "metadata": {"long-key": 1, "k": 2.50},
}


@pytest.mark.parametrize(
    "extra", [{}, FULL_SUBMIT, JSONB_FORMS], ids=["bare", "every-field", "jsonb-forms"]
)
async def test_submit_answers_the_task_as_a_read_shows_it(client, tenant, extra) -> None:
    # The submit's statement returns the new row's clock and JSON values; the rest of the
    # answer is built from the submit and the table's defaults. It must be what a read
    # of the task returns, byte for byte.
    headers = {
        **bearer(tenant["apiKey"]),
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    }
    body = {"type": "render", "callbackUrl": HOOK, "input": {"n": 1, "s": "é"}, **extra}
    r = await client.post("/v1/tasks", json=body, headers=headers)
    assert r.status_code == 202, r.text
    read = await client.get(r.headers["location"], headers=bearer(tenant["apiKey"]))
    assert r.content == read.content
    assert r.headers["etag"] == read.headers["etag"]


async def test_a_burst_of_submits_each_answers_its_own_task(client, tenant) -> None:
    # One statement writes the burst (group commit); each answer is its own row's, the
    # keyed repeats answer the first of their key, and each equals a read of it.
    def body(i: int) -> dict[str, Any]:
        if i % 2 and i % 4 == 1:  # keys k0..k4, one body per key: the repeats replay
            return {"type": f"k{i % 5}", "callbackUrl": HOOK, "input": {"key": i % 5}}
        extra = FULL_SUBMIT if i % 3 == 0 else {"metadata": {"i": i}}
        return {"type": f"t{i}", "callbackUrl": HOOK, "input": {"i": i}, **extra}

    def headers(i: int) -> dict[str, str]:
        h = bearer(tenant["apiKey"])
        return {**h, "Idempotency-Key": f"k{i % 5}"} if i % 2 else h

    responses = await asyncio.gather(
        *(client.post("/v1/tasks", json=body(i), headers=headers(i)) for i in range(30))
    )
    replays = 0
    for i, r in enumerate(responses):
        if r.status_code == 409:  # a keyed repeat while its first was in flight
            assert i % 2 and r.json()["error"]["code"] == "idempotency_in_flight"
            continue
        assert r.status_code in (202, 422), r.text
        if r.status_code == 422:  # the key's first submit had another body
            assert r.json()["error"]["code"] == "idempotency_key_reused"
            continue
        task = r.json()
        if "idempotent-replayed" in r.headers:
            replays += 1
        else:
            assert task["input"] == body(i)["input"]
        read = await client.get(f"/v1/tasks/{task['id']}", headers=bearer(tenant["apiKey"]))
        assert r.content == read.content
    assert replays  # a key's repeat with its first body answers the first task


async def test_get_etag_and_304(client, tenant) -> None:
    task = (await submit(client, tenant["apiKey"])).json()
    r = await client.get(f"/v1/tasks/{task['id']}", headers=bearer(tenant["apiKey"]))
    assert r.status_code == 200 and r.json()["id"] == task["id"]
    etag = r.headers["etag"]
    assert r.headers["retry-after"] == "1"
    r2 = await client.get(
        f"/v1/tasks/{task['id']}", headers={**bearer(tenant["apiKey"]), "If-None-Match": etag}
    )
    assert r2.status_code == 304 and r2.content == b""
    await client.post(
        f"/v1/tasks/{task['id']}/complete", json={"status": "succeeded"}, headers=ADMIN
    )
    r3 = await client.get(
        f"/v1/tasks/{task['id']}", headers={**bearer(tenant["apiKey"]), "If-None-Match": etag}
    )
    assert r3.status_code == 200 and r3.headers["etag"] != etag
    assert "retry-after" not in r3.headers


async def test_other_tenants_task_is_404(client, tenant, other_tenant) -> None:
    task = (await submit(client, tenant["apiKey"])).json()
    other = bearer(other_tenant["apiKey"])
    for method, path in [("GET", ""), ("POST", "/cancel")]:
        r = await client.request(method, f"/v1/tasks/{task['id']}{path}", headers=other)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    listing = await client.get("/v1/tasks", headers=other)
    assert listing.json()["data"] == []


async def test_unknown_id_is_404(client, tenant) -> None:
    r = await client.get("/v1/tasks/task_doesnotexist", headers=bearer(tenant["apiKey"]))
    assert r.status_code == 404
    assert r.json() == {"error": {"code": "not_found", "message": "task not found"}}
    r = await client.post("/v1/tasks/task_nope/complete", json={"status": "failed"}, headers=ADMIN)
    assert r.status_code == 404


async def test_lifecycle_start_complete_conflict(client, tenant) -> None:
    tid = (await submit(client, tenant["apiKey"])).json()["id"]
    r = await client.post(f"/v1/tasks/{tid}/start", headers=ADMIN)
    assert r.status_code == 200 and r.json()["status"] == "running"
    r = await client.post(f"/v1/tasks/{tid}/start", headers=ADMIN)
    assert r.status_code == 409
    r = await client.post(
        f"/v1/tasks/{tid}/complete",
        json={"status": "succeeded", "result": {"url": "x"}},
        headers=ADMIN,
    )
    done = r.json()
    assert r.status_code == 200 and done["status"] == "succeeded" and done["version"] == 3
    assert done["result"] == {"url": "x"} and done["completedAt"]
    assert done["delivery"]["status"] == "pending" and done["delivery"]["eventId"]
    r = await client.post(f"/v1/tasks/{tid}/complete", json={"status": "failed"}, headers=ADMIN)
    assert r.status_code == 409
    body = r.json()
    assert body["error"]["code"] == "invalid_transition"
    assert body["task"]["status"] == "succeeded" and body["task"]["version"] == 3


async def test_partner_cancels_own_task(client, tenant) -> None:
    tid = (await submit(client, tenant["apiKey"])).json()["id"]
    r = await client.post(f"/v1/tasks/{tid}/cancel", headers=bearer(tenant["apiKey"]))
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    r = await client.post(f"/v1/tasks/{tid}/cancel", headers=ADMIN)
    assert r.status_code == 409


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"status": "running"},
        {"status": "queued"},
        {"status": "done"},
        {"status": "succeeded", "extra": 1},
        [],
    ],
)
async def test_complete_validation(client, tenant, body) -> None:
    tid = (await submit(client, tenant["apiKey"])).json()["id"]
    r = await client.post(f"/v1/tasks/{tid}/complete", json=body, headers=ADMIN)
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"


async def test_executor_routes_need_admin(client, tenant) -> None:
    tid = (await submit(client, tenant["apiKey"])).json()["id"]
    partner = bearer(tenant["apiKey"])
    assert (await client.post(f"/v1/tasks/{tid}/start", headers=partner)).status_code == 403
    r = await client.post(f"/v1/tasks/{tid}/complete", json={"status": "failed"}, headers=partner)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Basic abc"},
        {"Authorization": "Bearer "},
        {"Authorization": "hr_nokind"},
    ],
)
async def test_bad_credentials_are_401(client, tenant, headers) -> None:
    for method, path in [
        ("POST", "/v1/tasks"),
        ("GET", "/v1/tasks"),
        ("GET", "/v1/tasks/x"),
        ("POST", "/v1/tasks/x/complete"),
        ("POST", "/v1/admin/tenants"),
    ]:
        r = await client.request(method, path, json={}, headers=headers)
        assert r.status_code == 401, (method, path, r.text)
        assert r.json()["error"]["code"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"


async def test_admin_cannot_submit_without_tenant(client) -> None:
    r = await client.post("/v1/tasks", json={"type": "x", "callbackUrl": HOOK}, headers=ADMIN)
    assert r.status_code == 403


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"callbackUrl": HOOK}, "validation_error"),
        ({"type": "", "callbackUrl": HOOK}, "validation_error"),
        ({"type": "x" * 101, "callbackUrl": HOOK}, "validation_error"),
        ({"type": 5, "callbackUrl": HOOK}, "validation_error"),
        ({"type": "t"}, "invalid_callback_url"),
        ({"type": "t", "callbackUrl": 12}, "invalid_callback_url"),
        ({"type": "t", "callbackUrl": "ftp://127.0.0.1/x"}, "invalid_callback_url"),
        ({"type": "t", "callbackUrl": "not a url"}, "invalid_callback_url"),
        ({"type": "t", "callbackUrl": "http://user:pw@127.0.0.1/x"}, "invalid_callback_url"),
        ({"type": "t", "callbackUrl": "http://127.0.0.1:99999/x"}, "invalid_callback_url"),
        ({"type": "t", "callbackUrl": "http://10.0.0.1/x"}, "blocked_callback_url"),
        ({"type": "t", "callbackUrl": "http://169.254.169.254/latest"}, "blocked_callback_url"),
        ({"type": "t", "callbackUrl": "http://[::ffff:10.0.0.1]/x"}, "blocked_callback_url"),
        ({"type": "t", "callbackUrl": "http://host.invalid/x"}, "invalid_callback_url"),
        ({"type": "t", "callbackUrl": "http://127.0.0.1/" + "a" * 2100}, "invalid_callback_url"),
        ({"type": "t", "callbackUrl": HOOK, "metadata": [1]}, "validation_error"),
        ({"type": "t", "callbackUrl": HOOK, "metadata": {"k": "v" * 20000}}, "validation_error"),
        ({"type": "t", "callbackUrl": HOOK, "timeoutSeconds": 0}, "validation_error"),
        ({"type": "t", "callbackUrl": HOOK, "timeoutSeconds": "10"}, "validation_error"),
        ({"type": "t", "callbackUrl": HOOK, "timeoutSeconds": True}, "validation_error"),
        ({"type": "t", "callbackUrl": HOOK, "surprise": 1}, "validation_error"),
    ],
)
async def test_submit_validation(client, tenant, body, code) -> None:
    r = await client.post("/v1/tasks", json=body, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == code
    listing = await client.get("/v1/tasks", headers=bearer(tenant["apiKey"]))
    assert listing.json()["data"] == []


async def test_https_only_unless_allowed(client, tenant) -> None:
    client._transport.app.state.address_policy = type(
        client._transport.app.state.address_policy
    ).from_settings("127.0.0.0/8", False)
    r = await submit(client, tenant["apiKey"])
    assert r.status_code == 422 and "http" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("content", "ctype", "status", "code"),
    [
        (b"{not json", "application/json", 400, "invalid_json"),
        (b"", "application/json", 400, "invalid_json"),
        (b'{"type": "t", "callbackUrl": "x"', "application/json", 400, "invalid_json"),
        (b"\xff\xfe{}", "application/json", 400, "invalid_json"),
        (b'{"a": NaN}', "application/json", 400, "invalid_json"),
        (b"[" * 100 + b"]" * 100, "application/json", 400, "invalid_json"),
        (b"type=t", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
        (b"{}", "text/plain", 415, "unsupported_media_type"),
    ],
)
async def test_malformed_bodies(client, tenant, content, ctype, status, code) -> None:
    headers = {**bearer(tenant["apiKey"]), "Content-Type": ctype}
    r = await client.post("/v1/tasks", content=content, headers=headers)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code


async def test_oversize_body_is_413(client, tenant) -> None:
    big = {"type": "t", "callbackUrl": HOOK, "input": "x" * 1_100_000}
    r = await client.post("/v1/tasks", json=big, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"

    async def chunks():
        for _ in range(300):
            yield b"x" * 4096  # no Content-Length: the cap must hold while streaming

    r = await client.post("/v1/tasks", content=chunks(), headers=bearer(tenant["apiKey"]))
    assert r.status_code == 413


async def test_idempotency_same_body_same_task(client, tenant) -> None:
    headers = {**bearer(tenant["apiKey"]), "Idempotency-Key": "order-77"}
    body = {"type": "t", "callbackUrl": HOOK, "input": {"a": 1, "b": 2}}
    first = await client.post("/v1/tasks", json=body, headers=headers)
    # Same JSON value, different key order and whitespace: the same request.
    again = await client.post(
        "/v1/tasks",
        content=b'{"input": {"b": 2, "a": 1}, "callbackUrl": "%s", "type": "t"}' % HOOK.encode(),
        headers={**headers, "Content-Type": "application/json"},
    )
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    changed = await client.post("/v1/tasks", json={**body, "input": {"a": 2}}, headers=headers)
    assert changed.status_code == 422
    assert changed.json()["error"]["code"] == "idempotency_key_reused"


async def test_idempotency_keys_are_scoped_to_tenant(client, tenant, other_tenant) -> None:
    body = {"type": "t", "callbackUrl": HOOK}
    a = await client.post(
        "/v1/tasks", json=body, headers={**bearer(tenant["apiKey"]), "Idempotency-Key": "k"}
    )
    b = await client.post(
        "/v1/tasks", json=body, headers={**bearer(other_tenant["apiKey"]), "Idempotency-Key": "k"}
    )
    assert a.status_code == b.status_code == 202 and a.json()["id"] != b.json()["id"]


async def test_idempotency_under_concurrency(client, tenant, pool) -> None:
    headers = {**bearer(tenant["apiKey"]), "Idempotency-Key": "burst"}
    body = {"type": "t", "callbackUrl": HOOK}
    responses = await asyncio.gather(
        *[client.post("/v1/tasks", json=body, headers=headers) for _ in range(20)]
    )
    codes = [r.status_code for r in responses]
    assert set(codes) <= {202, 409}, codes
    ids = {r.json()["id"] for r in responses if r.status_code == 202}
    assert len(ids) == 1
    for r in responses:
        if r.status_code == 409:
            assert r.json()["error"]["code"] == "idempotency_in_flight"
    assert await pool.fetchval("SELECT count(*) FROM tasks") == 1


async def test_bad_idempotency_key(client, tenant) -> None:
    r = await client.post(
        "/v1/tasks",
        json={"type": "t", "callbackUrl": HOOK},
        headers={**bearer(tenant["apiKey"]), "Idempotency-Key": "x" * 300},
    )
    assert r.status_code == 400


async def test_listing_keyset_pagination_and_filters(client, tenant) -> None:
    key = bearer(tenant["apiKey"])
    ids = [(await submit(client, tenant["apiKey"])).json()["id"] for _ in range(5)]
    await client.post(f"/v1/tasks/{ids[1]}/complete", json={"status": "failed"}, headers=ADMIN)

    async def all_listed() -> bool:
        # A page stops at the oldest transaction still open (list_tasks' horizon), which
        # the app's own background writes may briefly hold: wait until none hides a task.
        page = (await client.get("/v1/tasks", params={"fields": "id"}, headers=key)).json()
        return len(page["data"]) == 5 and page["data"][-1]["id"] == ids[1]

    await eventually(all_listed, what="the 5 tasks listed")
    seen, cursor = [], None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/tasks", params=params, headers=key)).json()
        seen += [t["id"] for t in page["data"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 5
    assert seen[-1] == ids[1]  # most recently updated comes last
    failed = (await client.get("/v1/tasks", params={"status": "failed"}, headers=key)).json()
    assert [t["id"] for t in failed["data"]] == [ids[1]]
    after = failed["data"][0]["updatedAt"]
    newer = (await client.get("/v1/tasks", params={"updatedAfter": after}, headers=key)).json()
    assert newer["data"] == []


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "0"},
        {"limit": "abc"},
        {"limit": "5000"},
        {"cursor": "!!notacursor"},
        {"updatedAfter": "yesterday"},
        {"updatedAfter": "2026-01-01T00:00:00"},
    ],
)
async def test_listing_bad_params_are_400(client, tenant, params) -> None:
    r = await client.get("/v1/tasks", params=params, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"


async def test_listing_bad_status_is_422(client, tenant) -> None:
    r = await client.get("/v1/tasks", params={"status": "nope"}, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 422


async def test_unknown_route_and_method(client) -> None:
    r = await client.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await client.delete("/v1/tasks")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


async def test_listing_never_skips_a_late_commit(client, tenant, pool) -> None:
    """A transaction that started earlier but commits later must not fall behind a cursor."""
    from hookrelay.outbox import complete_task

    key = bearer(tenant["apiKey"])
    a = (await submit(client, tenant["apiKey"])).json()["id"]
    b = (await submit(client, tenant["apiKey"])).json()["id"]
    page = (await client.get("/v1/tasks", headers=key)).json()
    cursor_ts = page["data"][-1]["updatedAt"]
    slow = await pool.acquire()
    tx = slow.transaction()
    await tx.start()
    try:
        await complete_task(slow, a, "succeeded")  # updated_at = this transaction's start
        await client.post(f"/v1/tasks/{b}/complete", json={"status": "failed"}, headers=ADMIN)
        seen = (
            await client.get("/v1/tasks", params={"updatedAfter": cursor_ts}, headers=key)
        ).json()["data"]
        assert seen == []  # b is newer than the open transaction: held back, not skipped
        await tx.commit()
    finally:
        await pool.release(slow)
    seen = (await client.get("/v1/tasks", params={"updatedAfter": cursor_ts}, headers=key)).json()[
        "data"
    ]
    assert [t["id"] for t in seen] == [a, b]


async def test_complete_a_task_an_older_release_submitted(client, tenant, pool) -> None:
    """Submitted without its destination key (a release before 0018): completed through
    the older path, in a transaction, with the same answer and one outbox row."""
    tid = (await submit(client, tenant["apiKey"])).json()["id"]
    await pool.execute("DELETE FROM destination_keys")
    r = await client.post(f"/v1/tasks/{tid}/cancel", headers=bearer(tenant["apiKey"]))
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    row = await pool.fetchrow("SELECT event_id, host FROM outbox WHERE task_id = $1", tid)
    assert (
        row["event_id"] == r.json()["delivery"]["eventId"] and row["host"] == "http://127.0.0.1:9"
    )
    r = await client.post(f"/v1/tasks/{tid}/complete", json={"status": "failed"}, headers=ADMIN)
    assert r.status_code == 409 and r.json()["task"]["status"] == "cancelled", r.text
