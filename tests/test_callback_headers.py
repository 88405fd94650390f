"""Callback headers: sent on every attempt, retry, redelivery and replay to a real
receiver; refused by rule; never shown in an answer, the console or a log; sealed at rest."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
from typing import Any

import pytest
from aiohttp import web

from hookrelay.client import AsyncClient, Client
from hookrelay.outbox.dispatch.dispatcher import UNDECRYPTABLE_HEADERS, running
from hookrelay.outbox.errors import ConfigurationError
from hookrelay.outbox.keys import SecretBox, rotate_master_key
from hookrelay.outbox.keys.callback_headers import problem, seal, unseal
from hookrelay.outbox.tasks import NewTask, create_task
from hookrelay.receiver import verify
from tests.harness.waiting import eventually
from tests.receiver import Receiver
from tests.support import ADMIN, bearer, dispatcher, wait_drained
from tests.test_console import signed_in

pytestmark = pytest.mark.anyio
SECRET = "sk-" + secrets.token_hex(16)


def header(received: Any, name: str) -> str | None:
    return {k.lower(): v for k, v in received.headers.items()}.get(name.lower())


async def submit(client, tenant, url: str, headers: dict[str, Any]):
    return await client.post(
        "/v1/tasks",
        json={"type": "t", "callbackUrl": url, "callbackHeaders": headers},
        headers=bearer(tenant["apiKey"]),
    )


async def test_sent_on_every_attempt_retry_replay_and_redelivery_and_shown_nowhere(
    client, tenant, pool, runtime, receiver, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    mode = {"ok": False}

    async def endpoint(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=204 if mode["ok"] else 500)

    receiver.behaviour = endpoint
    key = bearer(tenant["apiKey"])
    r = await submit(client, tenant, receiver.url, {"X-Api-Key": SECRET, "X-Ref": "acme"})
    assert r.status_code == 202, r.text
    assert r.json()["callbackHeaders"] == ["X-Api-Key", "X-Ref"]
    tid = r.json()["id"]
    answers = [r.text]
    r = await client.post(f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN)
    answers.append(r.text)
    async with running(dispatcher(runtime, pool)):
        # First attempt and its two retries fail: a dead letter.
        await wait_drained(pool)
        task = (await client.get(f"/v1/tasks/{tid}", headers=key)).json()
        assert task["delivery"]["status"] == "dead" and len(receiver.received) == 3
        event_id = task["delivery"]["eventId"]
        mode["ok"] = True
        # Ops replay it, then the partner redelivers it: each sends the headers again.
        r = await client.post(f"/v1/admin/dead-letters/{event_id}/replay", headers=ADMIN)
        assert r.status_code == 202, r.text
        answers.append(r.text)
        await receiver.wait_for(4)
        await wait_drained(pool)
        r = await client.post(f"/v1/tasks/{tid}/redeliver", headers=key)
        assert r.status_code == 202
        answers.append(r.text)
        await receiver.wait_for(5)
        await wait_drained(pool)
    assert len(receiver.received) == 5
    for got in receiver.received:
        assert header(got, "x-api-key") == SECRET and header(got, "x-ref") == "acme"
        # The signature covers id, timestamp and body, not the callback headers.
        verify(got.headers, got.body, secrets=[tenant["signingSecret"]])
    # Every answer about the task, its attempts and its dead letter: names, never values.
    for path, who in [
        (f"/v1/tasks/{tid}", key),
        ("/v1/tasks", key),
        (f"/v1/tasks/{tid}/deliveries", key),
        (f"/v1/admin/dead-letters/{event_id}", ADMIN),
        ("/v1/admin/dead-letters", ADMIN),
        ("/v1/admin/destinations", ADMIN),
    ]:
        r = await client.get(path, headers=who)
        assert r.status_code == 200, path
        answers.append(r.text)
    shown = (await client.get(f"/v1/tasks/{tid}", headers=key)).json()
    assert shown["callbackHeaders"] == ["X-Api-Key", "X-Ref"]
    await signed_in(client)
    for page in (f"/ops/tasks/{tid}", f"/ops/events/{event_id}", "/ops/dead-letters"):
        r = await client.get(page)
        assert r.status_code == 200, page
        answers.append(r.text)
    assert all(SECRET not in text for text in answers)
    assert SECRET not in caplog.text
    # At rest: sealed, and no column of any table holds the value.
    sealed = await pool.fetchval("SELECT sealed FROM callback_headers WHERE task_id = $1", tid)
    assert SECRET.encode() not in sealed
    assert unseal(runtime.secret_box, tid, sealed) == {"X-Api-Key": SECRET, "X-Ref": "acme"}
    tables = await pool.fetch("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    for t in tables:
        dump = await pool.fetchval(f"SELECT string_agg(x::text, '') FROM \"{t[0]}\" x")
        assert dump is None or SECRET not in dump, t[0]


async def test_a_task_without_headers_shows_none_and_sends_none(
    client, tenant, pool, runtime, receiver
) -> None:
    r = await client.post(
        "/v1/tasks",
        json={"type": "t", "callbackUrl": receiver.url},
        headers=bearer(tenant["apiKey"]),
    )
    assert r.json()["callbackHeaders"] == []
    tid = r.json()["id"]
    await client.post(f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN)
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(1)
    assert header(receiver.received[0], "x-api-key") is None


BIG = "v" * 1000


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ({f"x-h{i}": "v" for i in range(11)}, "length <= 10"),
        ({f"x-h{i}": BIG for i in range(5)}, "4096 bytes"),
        ({"Host": "evil.example"}, "'Host' is a reserved"),
        ({"content-type": "text/plain"}, "'content-type' is a reserved"),
        ({"Content-Length": "1"}, "'Content-Length' is a reserved"),
        ({"connection": "close"}, "'connection' is a reserved"),
        ({"transfer-encoding": "chunked"}, "'transfer-encoding' is a reserved"),
        ({"TE": "trailers"}, "'TE' is a reserved"),
        ({"upgrade": "h2c"}, "'upgrade' is a reserved"),
        ({"Proxy-Authorization": "x"}, "'Proxy-Authorization' is a reserved"),
        ({"webhook-signature": "v1,x"}, "'webhook-signature' is a reserved"),
        ({"traceparent": "00-x"}, "'traceparent' is a reserved"),
        ({"tracestate": "a=b"}, "'tracestate' is a reserved"),
        ({"bad name": "x"}, "'bad name' is not a valid header name"),
        ({"x-split": "a\r\nx-injected: 1"}, "the value of 'x-split'"),
        ({"x-empty": ""}, "the value of 'x-empty'"),
        ({"X-Key": "a", "x-key": "b"}, "'x-key' is given twice"),
    ],
)
async def test_refused_by_rule_naming_the_header(client, tenant, receiver, headers, named) -> None:
    r = await submit(client, tenant, receiver.url, headers)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "validation_error" and named in error["message"]
    assert error["message"].startswith("callbackHeaders")


async def test_refused_when_not_strings_or_not_an_object(client, tenant, receiver) -> None:
    for bad in ({"x-n": 1}, ["x-a"], "x-a: b"):
        r = await submit(client, tenant, receiver.url, bad)  # type: ignore[arg-type]
        assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"


async def test_wrong_credentials_are_refused_before_the_headers_are_read(client, receiver):
    r = await client.post(
        "/v1/tasks",
        json={"type": "t", "callbackUrl": receiver.url, "callbackHeaders": {"host": "x"}},
        headers=bearer("nope"),
    )
    assert r.status_code == 401 and r.json()["error"]["code"]


async def test_limits_at_the_edge_are_accepted(client, tenant, receiver) -> None:
    ten = {f"x-h{i}": "v" for i in range(10)}
    assert (await submit(client, tenant, receiver.url, ten)).status_code == 202
    # 4096 bytes of names and values in all, exactly.
    exact = {"x-a": "v" * (4096 - 3)}
    assert problem(exact) is None
    assert (await submit(client, tenant, receiver.url, exact)).status_code == 202


async def test_idempotent_repeat_keeps_the_first_headers(client, tenant, receiver) -> None:
    key = {**bearer(tenant["apiKey"]), "Idempotency-Key": "k1"}
    body = {"type": "t", "callbackUrl": receiver.url, "callbackHeaders": {"x-api-key": SECRET}}
    first = await client.post("/v1/tasks", json=body, headers=key)
    again = await client.post("/v1/tasks", json=body, headers=key)
    assert again.json()["id"] == first.json()["id"] and again.json()["callbackHeaders"] == [
        "x-api-key"
    ]
    body["callbackHeaders"] = {"x-api-key": "other"}
    assert (await client.post("/v1/tasks", json=body, headers=key)).status_code == 422


async def test_headers_that_do_not_decrypt_dead_letter_the_event(
    client, tenant, pool, runtime, receiver
) -> None:
    r = await submit(client, tenant, receiver.url, {"x-api-key": SECRET})
    tid = r.json()["id"]
    # Another task's sealed headers: authentic, but bound to that task's id.
    await pool.execute(
        "UPDATE callback_headers SET sealed = $2 WHERE task_id = $1",
        tid,
        seal(runtime.secret_box, "task_other", {"x-api-key": "x"}),
    )
    await client.post(f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN)
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
    assert not receiver.received
    error = await pool.fetchval("SELECT last_error FROM dead_letters")
    assert error == UNDECRYPTABLE_HEADERS


async def test_held_not_buried_when_this_process_has_another_key(
    client, tenant, pool, runtime, receiver, monkeypatch
) -> None:
    r = await submit(client, tenant, receiver.url, {"x-api-key": SECRET})
    tid = r.json()["id"]
    other = SecretBox(secrets.token_bytes(32))
    await pool.execute(
        "UPDATE callback_headers SET sealed = $2 WHERE task_id = $1",
        tid,
        seal(other, tid, {"x-api-key": SECRET}),
    )
    await client.post(f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN)

    async def mismatch(conn, box) -> bool:
        return False  # the database's key check: this process's key is not the database's

    monkeypatch.setattr("hookrelay.outbox.dispatch.dispatcher.key_matches", mismatch)
    d = dispatcher(runtime, pool)
    async with running(d):
        await eventually(lambda: d.counters["held_wrong_key"] >= 1, 10)
    assert not receiver.received
    assert await pool.fetchval("SELECT count(*) FROM dead_letters") == 0


async def test_master_key_rotation_reseals_them(client, tenant, pool, runtime) -> None:
    r = await submit(client, tenant, "http://127.0.0.1:9/hook", {"x-api-key": SECRET})
    tid = r.json()["id"]
    new = SecretBox(secrets.token_bytes(32))
    async with pool.acquire() as conn:
        await rotate_master_key(conn, runtime.secret_box, new)
    sealed = await pool.fetchval("SELECT sealed FROM callback_headers WHERE task_id = $1", tid)
    assert unseal(new, tid, sealed) == {"x-api-key": SECRET}
    with pytest.raises(ConfigurationError):
        unseal(runtime.secret_box, tid, sealed)


async def test_master_key_rotation_stops_at_headers_that_do_not_decrypt(
    client, tenant, pool, runtime
) -> None:
    r = await submit(client, tenant, "http://127.0.0.1:9/hook", {"x-api-key": SECRET})
    tid = r.json()["id"]
    await pool.execute(
        "UPDATE callback_headers SET sealed = '\\x01'::bytea WHERE task_id = $1", tid
    )
    with pytest.raises(ConfigurationError, match=f"callback headers of task {tid}"):
        async with pool.acquire() as conn:
            await rotate_master_key(conn, runtime.secret_box, SecretBox(secrets.token_bytes(32)))


async def test_create_task_needs_the_box_for_headers(pool, tenant) -> None:
    spec = NewTask(type="t", callback_url="http://127.0.0.1:9/h", callback_headers={"x-a": "b"})
    async with pool.acquire() as conn:
        with pytest.raises(ConfigurationError, match="master key"):
            await create_task(conn, tenant["id"], spec)


async def test_clients_send_callback_headers(live_api) -> None:
    url, key = live_api
    async with AsyncClient(url, key) as c:
        task = await c.submit(
            "t", callback_url="http://127.0.0.1:9/hook", callback_headers={"x-api-key": SECRET}
        )
    assert task.callback_headers == ("x-api-key",)

    def sync_submit() -> tuple[str, ...]:
        with Client(url, key) as c:
            return c.submit(
                "t", callback_url="http://127.0.0.1:9/hook", callback_headers={"X-A": "b"}
            ).callback_headers

    assert await asyncio.to_thread(sync_submit) == ("X-A",)


def test_sealed_blob_is_bound_to_its_task() -> None:
    box = SecretBox(base64.b64decode(base64.b64encode(secrets.token_bytes(32))))
    blob = seal(box, "task_a", {"x-a": "b"})
    assert unseal(box, "task_a", blob) == {"x-a": "b"}
    with pytest.raises(ConfigurationError):
        unseal(box, "task_b", blob)


def test_problem_counts_headers_for_any_caller() -> None:
    # The API's shape refuses an eleventh header first; other callers get the same rule.
    assert problem({f"x-{i}": "v" for i in range(11)}) == "at most 10 headers, got 11"
    assert problem({}) is None


async def test_through_the_egress_proxy_inside_the_tunnel(
    client, tenant, pool, runtime, receiver
) -> None:
    from tests.test_egress_proxy import RecordingProxy, with_settings

    proxy = await RecordingProxy().start()
    try:
        r = await submit(client, tenant, receiver.url, {"x-api-key": SECRET})
        tid = r.json()["id"]
        await client.post(f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN)
        async with running(dispatcher(with_settings(runtime, egress_proxy=proxy.url), pool)):
            await wait_drained(pool)
    finally:
        await proxy.stop()
    assert header(receiver.received[0], "x-api-key") == SECRET
    # The proxy saw a CONNECT to the checked address, nothing of the request inside.
    assert proxy.requests == [f"CONNECT 127.0.0.1:{receiver.port} HTTP/1.1"]


async def test_the_webhook_body_names_them_as_python_would_write_it(client, tenant, pool) -> None:
    import json

    from hookrelay.outbox.tasks import get_task
    from hookrelay.outbox.tasks.state_changes import event_body

    r = await submit(client, tenant, "http://127.0.0.1:9/hook", {"X-Api-Key": SECRET, "x-b": "c"})
    tid = r.json()["id"]
    await client.post(f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN)
    body = await pool.fetchval("SELECT body FROM events WHERE task_id = $1", tid)
    assert json.loads(body)["data"]["callbackHeaders"] == ["X-Api-Key", "x-b"]
    assert SECRET not in body
    async with pool.acquire() as conn:
        task = await get_task(conn, tid)
    assert task is not None and event_body(task) == body


async def test_one_claim_with_and_without_headers_sends_each_its_own(
    client, tenant, pool, runtime, receiver
) -> None:
    with_headers = (await submit(client, tenant, receiver.url, {"x-api-key": SECRET})).json()["id"]
    r = await client.post(
        "/v1/tasks",
        json={"type": "t", "callbackUrl": receiver.url},
        headers=bearer(tenant["apiKey"]),
    )
    without = r.json()["id"]
    for tid in (with_headers, without):
        await client.post(f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN)
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(2)
    sent = {
        json.loads(got.body)["data"]["id"]: header(got, "x-api-key") for got in receiver.received
    }
    assert sent == {with_headers: SECRET, without: None}
