"""Server-Sent Events through a real uvicorn server: framing, ordering, resume, heartbeats,
auth, other tenants, the cap, the retention reset."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest

from hookrelay.service.server import event_loop as serving
from hookrelay.service.server import lifecycle
from hookrelay.service.server.app import create_app
from tests.support import ADMIN, bearer, eventually, free_port, purge_changes

pytestmark = pytest.mark.anyio
HOOK = "http://127.0.0.1:9/hook"


@dataclass
class Served:
    url: str
    app: Any


@pytest.fixture
async def served(runtime, pool) -> AsyncIterator[Served]:
    """The app under uvicorn in this loop (httpx's ASGI transport buffers whole bodies)."""
    settings = replace(runtime.settings, stream_heartbeat_s=0.2, streams_per_tenant=3)
    app = create_app(replace(runtime, settings=settings), pool=pool)
    port = free_port()
    config = serving.uvicorn_config(app, host="127.0.0.1", port=port, graceful_s=5)
    server = lifecycle.Server(config, on_listening=lambda: None, on_shutdown=app.state.hub.end_all)
    task = asyncio.create_task(server.serve())
    await eventually(lambda: server.started, what="uvicorn started")
    yield Served(f"http://127.0.0.1:{port}", app)
    server.stop()
    await task


@pytest.fixture
async def http(served) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=served.url, timeout=10) as c:
        yield c


@pytest.fixture
async def key(http) -> str:
    r = await http.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)
    return str(r.json()["apiKey"])


class Events:
    """Parsed events of one open stream (comments kept as {"comment": ...})."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def next(self, *, pings: bool = False) -> dict[str, Any] | None:
        """The next event (skipping pings unless asked); None at the end of the stream."""
        event: dict[str, Any] = {}
        while True:
            try:
                line = await asyncio.wait_for(anext(self._lines), 10)
            except StopAsyncIteration:
                return None
            if line == "":
                if event.get("comment") == " ping" and not pings:
                    event = {}
                    continue
                if event:
                    return event
                continue
            name, _, value = line.partition(":")
            if name == "":
                event["comment"] = value
            else:
                event[name] = value.removeprefix(" ")
            if name == "data":
                event["json"] = json.loads(event["data"])


async def submit(http: httpx.AsyncClient, key: str) -> str:
    r = await http.post("/v1/tasks", json={"type": "t", "callbackUrl": HOOK}, headers=bearer(key))
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


async def admin(http: httpx.AsyncClient, task_id: str, action: str, body: Any = None) -> None:
    r = await http.post(f"/v1/tasks/{task_id}/{action}", json=body, headers=ADMIN)
    assert r.status_code == 200, r.text


async def test_task_stream_current_state_then_each_change_until_terminal(http, key) -> None:
    task_id = await submit(http, key)
    async with http.stream("GET", f"/v1/tasks/{task_id}/events", headers=bearer(key)) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert r.headers["cache-control"] == "no-store"
        events = Events(r)
        first = await events.next()
        assert first is not None and (first["event"], first["id"]) == ("task", "1")
        shown = (await http.get(f"/v1/tasks/{task_id}", headers=bearer(key))).json()
        assert first["json"] == shown  # exactly what GET shows
        await admin(http, task_id, "start")
        await admin(http, task_id, "progress", {"percent": 40, "message": "reading"})
        await admin(http, task_id, "complete", {"status": "succeeded", "result": {"ok": 1}})
        got = [await events.next() for _ in range(3)]
        assert [e["id"] for e in got if e] == ["2", "3", "4"]
        assert got[1] and got[1]["json"]["progress"]["message"] == "reading"
        assert got[2] and got[2]["json"]["status"] == "succeeded"
        assert await events.next() is None  # ends after the terminal state


async def test_task_stream_resumes_after_last_event_id(http, key) -> None:
    task_id = await submit(http, key)
    await admin(http, task_id, "start")
    await admin(http, task_id, "progress", {"percent": 10})
    await admin(http, task_id, "complete", {"status": "failed"})
    headers = {**bearer(key), "Last-Event-ID": "2"}
    async with http.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as r:
        events = Events(r)
        got = [await events.next() for _ in range(3)]
    assert [e and e["id"] for e in got] == ["3", "4", None]
    assert got[1] and got[1]["json"]["status"] == "failed"
    # Up to date with a finished task: 204, which tells EventSource to stop reconnecting.
    headers["Last-Event-ID"] = "4"
    r = await http.get(f"/v1/tasks/{task_id}/events", headers=headers)
    assert r.status_code == 204 and r.text == ""


async def test_task_stream_past_retention_says_so_then_sends_the_current_state(
    http, key, pool
) -> None:
    task_id = await submit(http, key)
    await admin(http, task_id, "start")
    await admin(http, task_id, "progress", {"percent": 10})
    await purge_changes(pool, "version <= 2")
    headers = {**bearer(key), "Last-Event-ID": "1"}
    async with http.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as r:
        events = Events(r)
        reset, current = await events.next(), await events.next()
    assert reset and reset["event"] == "reset" and reset["json"]["code"] == "history_expired"
    assert reset["json"]["lastEventId"] == 1 and reset["json"]["resumeAfter"] == 3
    assert current and current["id"] == "3" and current["json"]["progress"]["percent"] == 10


async def test_task_stream_resumed_beyond_its_version_says_so_then_sends_the_current_state(
    http, key
) -> None:
    # An id from another task or another database: silence would leave the client
    # waiting for a version that may never come (and a finished task's stream empty).
    task_id = await submit(http, key)
    await admin(http, task_id, "start")
    for last in ("99", "3"):
        headers = {**bearer(key), "Last-Event-ID": last}
        async with http.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as r:
            events = Events(r)
            reset, current = await events.next(), await events.next()
        assert reset and reset["event"] == "reset", last
        assert reset["json"]["code"] == "unknown_position"
        assert reset["json"]["lastEventId"] == int(last) and reset["json"]["resumeAfter"] == 2
        assert current and current["id"] == "2" and current["json"]["status"] == "running"
    await admin(http, task_id, "complete", {"status": "succeeded"})
    headers = {**bearer(key), "Last-Event-ID": "99"}
    async with http.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as r:
        events = Events(r)
        got = [await events.next() for _ in range(3)]
    assert [e and e.get("event") for e in got] == ["reset", "task", None]
    assert got[1] and got[1]["json"]["status"] == "succeeded"


async def test_tenant_stream_orders_resumes_without_gap_or_duplicate(http, key) -> None:
    a, b = await submit(http, key), await submit(http, key)
    async with http.stream("GET", "/v1/events", headers=bearer(key)) as r:
        events = Events(r)
        start = await events.next()
        assert start == {"id": "2"}  # the position, no event: two submits so far
        await admin(http, a, "start")
        await admin(http, b, "start")
        await admin(http, a, "progress", {"percent": 5})
        got = [await events.next() for _ in range(3)]
    assert [(e["id"], e["json"]["id"]) for e in got if e] == [("3", a), ("4", b), ("5", a)]
    # Disconnected: these happen while nobody listens.
    await admin(http, b, "complete", {"status": "succeeded"})
    await admin(http, a, "progress", {"percent": 6})
    headers = {**bearer(key), "Last-Event-ID": "5"}
    async with http.stream("GET", "/v1/events", headers=headers) as r:
        events = Events(r)
        assert await events.next() == {"id": "5"}
        missed = [await events.next() for _ in range(2)]
        await admin(http, a, "complete", {"status": "succeeded"})
        live = await events.next()
    assert [e and e["id"] for e in [*missed, live]] == ["6", "7", "8"]
    assert missed[0] and missed[0]["json"]["status"] == "succeeded"


async def test_tenant_stream_reset_past_retention(http, key, pool) -> None:
    task_id = await submit(http, key)
    await admin(http, task_id, "start")
    await purge_changes(pool, "seq = 1")
    headers = {**bearer(key), "Last-Event-ID": "0"}
    async with http.stream("GET", "/v1/events", headers=headers) as r:
        events = Events(r)
        await events.next()
        reset, change = await events.next(), await events.next()
    assert reset and reset["event"] == "reset" and reset["id"] == "1"
    assert reset["json"]["resumeAfter"] == 1 and "updatedAfter" in reset["json"]["message"]
    assert change and change["id"] == "2"


async def test_heartbeat_comments_while_idle(http, key) -> None:
    async with http.stream("GET", "/v1/events", headers=bearer(key)) as r:
        events = Events(r)
        await events.next()
        assert await events.next(pings=True) == {"comment": " ping"}


async def test_auth_and_other_tenants(http, key) -> None:
    task_id = await submit(http, key)
    for path in ("/v1/events", f"/v1/tasks/{task_id}/events"):
        r = await http.get(path)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        r = await http.get(path, headers=bearer("hrk_wrong"))
        assert r.status_code == 401
        r = await http.get(path, headers=ADMIN)
        assert r.status_code == 403
    other = (await http.post("/v1/admin/tenants", json={"name": "o"}, headers=ADMIN)).json()
    r = await http.get(f"/v1/tasks/{task_id}/events", headers=bearer(other["apiKey"]))
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    async with http.stream("GET", "/v1/events", headers=bearer(other["apiKey"])) as r:
        events = Events(r)
        assert await events.next() == {"id": "0"}
        await admin(http, task_id, "start")  # acme's change: never on globex's stream
        mine = await submit(http, other["apiKey"])
        got = await events.next()
    assert got and got["json"]["id"] == mine and got["id"] == "1"


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "99999999999999999999"])
async def test_bad_last_event_id_is_400(http, key, value) -> None:
    headers = {**bearer(key), "Last-Event-ID": value}
    r = await http.get("/v1/events", headers=headers)
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
    assert "Last-Event-ID" in r.json()["error"]["message"]


async def test_cap_per_tenant_is_429_with_retry_after(http, key, served) -> None:
    task_id = await submit(http, key)
    async with (
        http.stream("GET", "/v1/events", headers=bearer(key)),
        http.stream("GET", "/v1/events", headers=bearer(key)),
        http.stream("GET", f"/v1/tasks/{task_id}/events", headers=bearer(key)),
    ):
        r = await http.get("/v1/events", headers=bearer(key))
        assert r.status_code == 429 and r.headers["retry-after"] == "10"
        assert r.json()["error"]["code"] == "too_many_streams"
    # Closed streams give their places back as soon as the client goes.
    await eventually(lambda: not served.app.state.hub._tenants, what="streams released")


async def test_shutdown_ends_open_streams(http, key, served) -> None:
    async with http.stream("GET", "/v1/events", headers=bearer(key)) as r:
        events = Events(r)
        await events.next()
        served.app.state.hub.end_all()
        assert await events.next() is None


async def test_a_failure_mid_stream_ends_it_cleanly(http, key, monkeypatch) -> None:
    from hookrelay.outbox.store import changes

    task_id = await submit(http, key)

    async def unavailable(*args: Any, **kwargs: Any) -> None:
        raise ConnectionResetError("the database went away")

    monkeypatch.setattr(changes, "task_oldest_version", unavailable)
    headers = {**bearer(key), "Last-Event-ID": "0"}
    r = await http.get(f"/v1/tasks/{task_id}/events", headers=headers)
    # Headers were out before the failure: the stream just ends, to be resumed.
    assert r.status_code == 200 and r.text == ""


async def test_a_resumed_task_stream_ends_with_its_terminal_change_not_yet_numbered(
    http, key, pool
) -> None:
    """The tenant already has a stream here (so the hub numbers nothing on open), and the
    last change, made with no NOTIFY, still waits in the queue: the stream numbers first,
    and so ends with the terminal event rather than with nothing."""
    from hookrelay.outbox import complete_task, start_task

    task_id = await submit(http, key)
    async with http.stream("GET", "/v1/events", headers=bearer(key)) as open_stream:
        assert open_stream.status_code == 200
        async with pool.acquire() as conn:
            await start_task(conn, task_id, notify=False)
            await complete_task(conn, task_id, "succeeded", notify=False)
        headers = {**bearer(key), "Last-Event-ID": "1"}
        async with http.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as r:
            events = Events(r)
            got = [await events.next() for _ in range(3)]
    assert [e and e["id"] for e in got] == ["2", "3", None]
    assert got[1] and got[1]["json"]["status"] == "succeeded"
