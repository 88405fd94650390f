"""Per-host circuit breaker: a failing host's deliveries are held, one probe per interval."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from aiohttp import web

from hookrelay.outbox.dispatch.dispatcher import running
from tests.receiver import Receiver
from tests.support import ADMIN, backlog, bearer, dispatcher, eventually, wait_drained

pytestmark = pytest.mark.anyio


async def test_open_circuit_holds_then_probe_recloses(client, pool, runtime, receiver) -> None:
    bad = await Receiver().start()
    healthy = {"ok": False}

    async def flaky(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=204 if healthy["ok"] else 500, text="boom")

    bad.behaviour = flaky
    rt = replace(
        runtime,
        settings=replace(
            runtime.settings,
            breaker_threshold=3,
            breaker_probe_s=0.5,
            max_attempts=50,
            retry_base_s=0.05,
            retry_cap_s=0.05,
        ),
    )
    host = f"http://127.0.0.1:{bad.port}"
    try:
        tenant, held = await backlog(pool, rt, bad.url, 20)
        _, fine = await backlog(pool, rt, receiver.url, 10, tenant)
        async with running(dispatcher(rt, pool)) as d:
            await receiver.wait_for(10)

            async def tripped() -> bool:
                state = await pool.fetchval("SELECT state FROM destinations WHERE host=$1", host)
                return state in ("open", "half-open")

            await eventually(tripped)
            sent_when_opened = len(bad.received)
            await asyncio.sleep(1.2)  # about two probe intervals
            probes = len(bad.received) - sent_when_opened
            assert 1 <= probes <= 3, probes
            # Held rows burned no budget while the circuit was open.
            max_budget = await pool.fetchval(
                "SELECT max(budget_used) FROM outbox WHERE host = $1", host
            )
            assert max_budget <= 3 + probes
            r = await client.get("/v1/admin/destinations", headers=ADMIN)
            [dest] = [x for x in r.json()["data"] if x["host"] == host]
            assert dest["state"] in ("open", "half-open") and dest["heldDeliveries"] == 20
            assert dest["consecutiveFailures"] >= 3 and "500" in dest["lastError"]
            metrics = (await client.get("/metrics", headers=ADMIN)).text
            assert f'hookrelay_destination_open{{host="{host}"}} 1.0' in metrics
            healthy["ok"] = True
            await wait_drained(pool, timeout=20)
        assert set(held) <= set(bad.event_ids()) and set(fine) <= set(receiver.event_ids())
        assert d.counters["probes"] >= 1
        state = await pool.fetchrow("SELECT * FROM destinations WHERE host=$1", host)
        assert state["state"] == "closed" and state["consecutive_failures"] == 0
    finally:
        await bad.stop()


async def test_destinations_route_needs_admin(client, tenant) -> None:
    assert (await client.get("/v1/admin/destinations")).status_code == 401
    r = await client.get("/v1/admin/destinations", headers=bearer(tenant["apiKey"]))
    assert r.status_code == 403
    r = await client.get("/v1/admin/destinations", headers=ADMIN)
    assert r.status_code == 200 and r.json() == {"data": []}
