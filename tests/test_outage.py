"""Database outage: the server stops mid-run; the API answers 503, both halves carry on after."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.pgserver import DedicatedPostgres
from tests.receiver import Receiver
from tests.support import (
    ADMIN,
    bearer,
    dispatcher_env,
    eventually,
    free_port,
    start,
    submit_and_complete,
    wait_for_port,
)

# A dedicated PostgreSQL stopped and restarted, a storm of killed connections.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _assert_unavailable(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "unavailable" and r.json()["error"]["message"]
    assert "Traceback" not in r.text


async def test_database_restart_mid_run(runtime, tmp_path: Path) -> None:
    pg = DedicatedPostgres(tmp_path / "db")
    dsn = pg.start()
    healthy = asyncio.Event()

    async def until_healthy(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=204 if healthy.is_set() else 500)

    rx = await Receiver(behaviour=until_healthy).start()
    port = free_port()
    env = dispatcher_env(
        runtime, dsn, port=str(port), host="127.0.0.1", db_wait_s="60", max_attempts="1000"
    )
    proc = await start("serve", env)
    try:
        await wait_for_port(port, proc)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=15) as c:
            r = await c.post("/v1/admin/tenants", json={"name": "outage"}, headers=ADMIN)
            key: str = r.json()["apiKey"]
            # Committed before the outage, failing at the receiver until after it.
            before = [await submit_and_complete(c, key, rx.url) for _ in range(5)]
            await rx.wait_for(5)

            pg.stop()
            started = time.monotonic()
            _assert_unavailable(await c.get(f"/v1/tasks/{before[0]}", headers=bearer(key)))
            _assert_unavailable(
                await c.post(
                    "/v1/tasks", headers=bearer(key), json={"type": "t", "callbackUrl": rx.url}
                )
            )
            _assert_unavailable(await c.get("/v1/tasks", headers=bearer(key)))
            assert (await c.get("/readyz")).status_code == 503
            assert (await c.get("/healthz")).status_code == 200
            # A hang would last db_wait_s (60 s): the bound is far from it and far above the
            # seconds these answers take on a loaded machine.
            assert time.monotonic() - started < 30, "answers during the outage must not hang"
            await asyncio.sleep(1.0)  # the dispatcher meets the outage too

            assert pg.start() == dsn
            healthy.set()

            async def submitted() -> str | None:
                try:
                    return await submit_and_complete(c, key, rx.url)
                except AssertionError:
                    return None

            after = [await eventually(submitted, 30, what="the API recovered", every=0.2)]
            delivered: dict[str, Any] = {}

            async def all_delivered() -> bool:
                for task_id in before + after:
                    t = (await c.get(f"/v1/tasks/{task_id}", headers=bearer(key))).json()
                    if t["delivery"]["status"] == "delivered":
                        delivered[task_id] = t
                return len(delivered) == len(before + after)

            await eventually(all_delivered, 30, what="every task delivered", every=0.2)
        assert proc.returncode is None, "serve must ride out the outage, not exit"
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)
        await rx.stop()
        pg.stop()


async def test_api_rides_out_a_connection_storm(client, tenant, dsn) -> None:
    """pg_terminate_backend on every connection, every 200 ms: 2xx or a clean 503, never a 500."""
    import asyncpg

    key = tenant["apiKey"]
    r = await client.post(
        "/v1/tasks", json={"type": "t", "callbackUrl": "http://127.0.0.1:9/"}, headers=bearer(key)
    )
    task_id = r.json()["id"]
    killer = await asyncpg.connect(dsn)
    kill_all = (
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    statuses: list[int] = []
    stop = asyncio.Event()

    async def storm() -> int:
        killed = 0
        for _ in range(10):
            await asyncio.sleep(0.2)
            killed += await killer.fetchval(kill_all)
        stop.set()
        return killed

    async def traffic() -> None:
        while not stop.is_set():
            for resp in (
                await client.get(f"/v1/tasks/{task_id}", headers=bearer(key)),
                await client.post(
                    "/v1/tasks",
                    headers=bearer(key),
                    json={"type": "t", "callbackUrl": "http://127.0.0.1:9/"},
                ),
            ):
                statuses.append(resp.status_code)
                if resp.status_code == 503:
                    _assert_unavailable(resp)
                else:
                    assert resp.status_code in (200, 202), resp.text

    try:
        killed, _ = await asyncio.gather(storm(), traffic())
    finally:
        await killer.close()
    assert killed >= 5 and len(statuses) > 20
    # Once the storm is over, the pool sheds its last dead connections (each
    # may cost one 503) and then everything works.

    async def answers() -> bool:
        r = await client.get(f"/v1/tasks/{task_id}", headers=bearer(key))
        return bool(r.status_code == 200)

    await eventually(answers, 5, what="the API recovered after the storm")
    for _ in range(5):
        assert (await client.get(f"/v1/tasks/{task_id}", headers=bearer(key))).status_code == 200
    print(
        f"\nstorm: {killed} connections killed, {len(statuses)} requests, "
        f"{statuses.count(503)} answered 503"
    )
