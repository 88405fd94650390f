"""The API as uvicorn serves it: limits that only a real HTTP server enforces."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from service.serving import run

from .support import bearer

pytestmark = pytest.mark.anyio


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
