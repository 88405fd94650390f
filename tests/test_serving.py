"""The API as uvicorn serves it: limits that only a real HTTP server enforces."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from hookrelay.service.server.event_loop import run, uvicorn_config
from tests.support import bearer

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


async def test_oversized_headers_get_a_clear_4xx(live_api) -> None:
    url, key = live_api
    async with httpx.AsyncClient(base_url=url) as c:
        r = await c.get("/v1/tasks", headers={**bearer(key), "X-Junk": "j" * 200_000})
        assert r.status_code == 431, r.text
        assert r.json()["error"]["code"] == "headers_too_large"
        # ...and it goes on serving everyone else.
        assert (await c.get("/v1/tasks", headers=bearer(key))).status_code == 200


async def test_oversized_body_on_the_wire_is_413(live_api) -> None:
    url, key = live_api
    async with httpx.AsyncClient(base_url=url) as c:
        r = await c.post(
            "/v1/tasks",
            content=b'{"a":"' + b"x" * 2_000_000 + b'"}',
            headers={**bearer(key), "Content-Type": "application/json"},
        )
    assert r.status_code == 413 and r.json()["error"]["code"]


async def test_header_limit_counts_every_header(client, tenant) -> None:
    many = {f"x-h{i}": "v" * 100 for i in range(200)}  # ~21 kB in small pieces
    r = await client.get("/v1/tasks", headers={**bearer(tenant["apiKey"]), **many})
    assert r.status_code == 431
    fine = {f"x-h{i}": "v" * 100 for i in range(50)}
    r = await client.get("/v1/tasks", headers={**bearer(tenant["apiKey"]), **fine})
    assert r.status_code == 200


def test_run_uses_uvloop() -> None:
    async def loop_name() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert run(loop_name()).startswith("uvloop")


@pytest.fixture
async def strict_api(runtime, dsn):
    """``hookrelay api`` (one process: the cap is each worker's) with short read deadlines
    and a cap of 20 connections; yields its port."""
    from tests.support import dispatcher_env, free_port, start, wait_for_port

    port = free_port()
    env = dispatcher_env(
        runtime,
        dsn,
        port=str(port),
        host="127.0.0.1",
        header_timeout_s="1",
        body_timeout_s="1",
        max_connections="20",
        keep_alive_s="1.5",
        workers="1",
    )
    proc = await start("api", env)
    try:
        await wait_for_port(port, proc)
        yield port
    finally:
        proc.terminate()
        await proc.wait()


async def _exchange(port: int, data: bytes, *, wait_s: float = 10.0) -> bytes:
    """Send ``data``, then read until the server closes (bounded by ``wait_s``)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), wait_s)
    finally:
        writer.close()


def _status(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else 0


async def test_idle_connection_is_closed(strict_api: int) -> None:
    assert await _exchange(strict_api, b"") == b""  # closed, not held open


async def test_keep_alive_holds_an_idle_connection_for_its_setting(strict_api: int) -> None:
    """Between requests a connection stays open for HOOKRELAY_KEEP_ALIVE_S (1.5 s here),
    then the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", strict_api)
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    try:
        for idle_s in (0.0, 0.7):  # the second request after an idle spell under the limit
            await asyncio.sleep(idle_s)
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert _status(head) == 200, head
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 10) == b""  # then closed by the server
        assert 1.0 < time.monotonic() - started < 5.0
    finally:
        writer.close()


def test_keep_alive_outlasts_common_clients_idle_expiry() -> None:
    """The client must be the side that closes an idle connection: a request it sends
    just as the server closes is lost to a reset (httpx's pool keeps idle connections
    5 s, as uvicorn's default keep-alive did). Beyond a load balancer's 60 s too."""
    from hookrelay.service.server.event_loop import ConnectionLimits
    from hookrelay.service.server.settings import Settings

    expiry = httpx.Limits().keepalive_expiry
    assert expiry is not None and Settings().keep_alive_s > max(60.0, expiry)
    assert ConnectionLimits().keep_alive_s == Settings().keep_alive_s
    assert uvicorn_config(None, host="127.0.0.1", port=0).timeout_keep_alive == 75.0


async def test_trickled_headers_get_408(strict_api: int) -> None:
    raw = await _exchange(strict_api, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1")
    assert _status(raw) == 408 and b'"request_timeout"' in raw


async def test_trickled_request_line_gets_408(strict_api: int) -> None:
    raw = await _exchange(strict_api, b"GET /hea")
    assert _status(raw) == 408


async def test_unfinished_body_gets_408(strict_api: int) -> None:
    head = (
        b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer nobody\r\nContent-Length: 100\r\n\r\n"
    )
    raw = await _exchange(strict_api, head + b'{"type":')
    assert _status(raw) in {401, 408}, raw  # 401 if auth answered first; never held open
    assert raw.count(b"HTTP/1.1 ") == 1


async def test_huge_header_is_refused_while_reading(strict_api: int) -> None:
    """A 128 MB header: 431 after the first 16 kB, without the rest being read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", strict_api)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
    sent, chunk = 0, b"a" * 65536
    try:
        while sent < 128 * 2**20:
            writer.write(chunk)
            await writer.drain()
            sent += len(chunk)
            # drain() need not yield when the server keeps up (it discards while it
            # lingers); yield so this client sees the answer the moment it comes.
            await asyncio.sleep(0)
            if reader.at_eof() or len(reader._buffer):  # type: ignore[attr-defined]
                break
    except ConnectionError:
        pass
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert _status(raw) == 431 and b'"headers_too_large"' in raw, raw[:200]
    assert sent < 64 * 2**20, sent  # refused long before the end


async def test_connection_cap_answers_503_and_frees_the_descriptor(strict_api: int) -> None:
    held = [await asyncio.open_connection("127.0.0.1", strict_api) for _ in range(20)]
    try:
        for _, w in held:
            w.write(b"GET /healthz HTTP/1.1\r\n")  # started, not finished: held by the server
        await asyncio.sleep(0.2)
        raw = await _exchange(strict_api, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", wait_s=5)
        assert _status(raw) == 503 and b'"too_many_connections"' in raw
    finally:
        for _, w in held:
            w.close()
    # Once the held connections are gone, the server answers again.
    for _ in range(50):
        raw = await _exchange(
            strict_api, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        if _status(raw) == 200:
            break
        await asyncio.sleep(0.1)
    assert _status(raw) == 200
