"""Streams across ``hookrelay api`` processes: a change made through one reaches streams held
by another, and SIGTERM with streams open ends them and exits cleanly."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support import ADMIN, bearer, dispatcher_env, free_port, start, wait_for_port
from tests.test_streams_sse import Events

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.processes]
HOOK = "http://127.0.0.1:9/hook"


async def api(runtime, dsn: str) -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    env = dispatcher_env(runtime, dsn, port=str(port), host="127.0.0.1", stream_heartbeat_s="0.5")
    proc = await start("api", env)
    await wait_for_port(port, proc)
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture
async def two_apis(runtime, dsn) -> AsyncIterator[list[tuple[asyncio.subprocess.Process, str]]]:
    apis = [await api(runtime, dsn), await api(runtime, dsn)]
    yield apis
    for proc, _ in apis:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


async def test_a_change_through_one_process_reaches_streams_on_another(two_apis) -> None:
    (_, one), (_, other) = two_apis
    async with (
        httpx.AsyncClient(base_url=one, timeout=10) as a,
        httpx.AsyncClient(base_url=other, timeout=10) as b,
    ):
        key = (await a.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)).json()[
            "apiKey"
        ]
        async with b.stream("GET", "/v1/events", headers=bearer(key)) as r:
            events = Events(r)
            assert await events.next() == {"id": "0"}
            body = {"type": "t", "callbackUrl": HOOK}
            task_id = (await a.post("/v1/tasks", json=body, headers=bearer(key))).json()["id"]
            await a.post(f"/v1/tasks/{task_id}/start", headers=ADMIN)
            await a.post(f"/v1/tasks/{task_id}/progress", json={"percent": 30}, headers=ADMIN)
            got = [await events.next() for _ in range(3)]
        assert [e and (e["id"], e["json"]["version"]) for e in got] == [
            ("1", 1),
            ("2", 2),
            ("3", 3),
        ]
        assert got[2] and got[2]["json"]["progress"]["percent"] == 30


async def test_sigterm_with_open_streams_ends_them_and_exits_cleanly(two_apis) -> None:
    proc, url = two_apis[0]
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        key = (await c.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)).json()[
            "apiKey"
        ]
        body = {"type": "t", "callbackUrl": HOOK}
        task_id = (await c.post("/v1/tasks", json=body, headers=bearer(key))).json()["id"]
        async with (
            c.stream("GET", "/v1/events", headers=bearer(key)) as all_events,
            c.stream("GET", f"/v1/tasks/{task_id}/events", headers=bearer(key)) as one_task,
        ):
            streams = [Events(all_events), Events(one_task)]
            for events in streams:
                assert await events.next() is not None
            proc.send_signal(signal.SIGTERM)
            for events in streams:
                assert await events.next() is None  # ended, not cut off
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    # Shutdown did not sit out uvicorn's graceful timeout waiting on the streams.
    assert b"graceful shutdown exceeded" not in err
    assert b"Waiting for connections to close" not in err


async def test_sigterm_answers_open_long_polls(two_apis) -> None:
    proc, url = two_apis[0]
    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        key = (await c.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN)).json()[
            "apiKey"
        ]
        body = {"type": "t", "callbackUrl": HOOK}
        task_id = (await c.post("/v1/tasks", json=body, headers=bearer(key))).json()["id"]
        # Longer than uvicorn's graceful timeout (HOOKRELAY_HTTP_TIMEOUT_S + 5 s): unanswered,
        # the poll would be cut off when that ran out.
        poll = asyncio.ensure_future(
            c.get(f"/v1/tasks/{task_id}", params={"wait": "30"}, headers=bearer(key))
        )
        await asyncio.sleep(0.5)  # the poll is waiting (if not, it is answered anyway)
        proc.send_signal(signal.SIGTERM)
        r = await poll
    assert r.status_code == 200 and r.json()["status"] == "queued"
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert b"Traceback" not in err and b"graceful shutdown exceeded" not in err
