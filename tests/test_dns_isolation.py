"""Issue scenario: sixteen submits to names whose DNS never answers, from tenant X.

They must not delay tenant Y's submit, nor cost Y's events their attempts: the
lookups run on their own, each under its deadline, and fail only themselves.
A fake nameserver on 127.0.0.1 reads every query and answers those of Y's name only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest

from hookrelay.service.server.app import create_app
from hookrelay.service.server.background import dispatcher_background
from tests.fakedns import FakeDns
from tests.support import ADMIN, backlog, bearer, eventually

pytestmark = pytest.mark.anyio

HANGING = [f"x{i}.hang.test" for i in range(16)]


@pytest.fixture
async def dns() -> AsyncIterator[FakeDns]:
    server = await FakeDns(records={"y.test": (["127.0.0.1"], 60)}, silent=set(HANGING)).start()
    yield server
    server.stop()


async def test_hanging_dns_of_one_tenant_costs_another_nothing(
    pool, runtime, receiver, dns
) -> None:
    rt = replace(
        runtime,
        settings=replace(
            runtime.settings,
            dns_servers=dns.server,
            dns_submit_timeout_s=1.0,
            dns_timeout_s=1.0,
            http_timeout_s=2.0,
        ),
    )
    # X also has events waiting whose names hang at delivery.
    await backlog(pool, rt, f"http://{HANGING[0]}:{receiver.port}/hook", 8)
    app = create_app(rt, pool=pool, background=[dispatcher_background(rt)])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hookrelay.test") as c:
            x = (await c.post("/v1/admin/tenants", json={"name": "x"}, headers=ADMIN)).json()
            y = (await c.post("/v1/admin/tenants", json={"name": "y"}, headers=ADMIN)).json()

            def submit(key: str, host: str) -> asyncio.Task[httpx.Response]:
                body = {"type": "t", "callbackUrl": f"http://{host}:{receiver.port}/hook"}
                return asyncio.create_task(c.post("/v1/tasks", json=body, headers=bearer(key)))

            xs = [submit(x["apiKey"], host) for host in HANGING]
            # Every X lookup is out, none answered.
            await eventually(lambda: all(dns.asked[h] for h in HANGING), what="X's lookups")
            ys = [await submit(y["apiKey"], "y.test") for _ in range(5)]
            assert [r.status_code for r in ys] == [202] * 5
            assert not any(t.done() for t in xs)  # Y went through while X still waited
            for r in ys:
                done = await c.post(
                    f"/v1/tasks/{r.json()['id']}/complete",
                    json={"status": "succeeded"},
                    headers=ADMIN,
                )
                assert done.status_code == 200, done.text
            await receiver.wait_for(5)

            for r in await asyncio.gather(*xs):
                assert r.status_code == 422
                error = r.json()["error"]
                assert error["code"] == "invalid_callback_url"
                assert "no DNS answer" in error["message"]
                assert "checks DNS when the task is submitted" in error["message"]

    # Y: every event delivered at its first attempt, nothing dead-lettered.
    y_attempts = await pool.fetch(
        "SELECT number, outcome FROM delivery_attempts WHERE tenant_id = $1", y["id"]
    )
    assert sorted(tuple(a) for a in y_attempts) == [(1, "delivered")] * 5
    assert (
        await pool.fetchval("SELECT count(*) FROM dead_letters WHERE tenant_id = $1", y["id"]) == 0
    )
    # X's waiting events failed their own attempts on DNS, and nobody else's.
    errors = await pool.fetch(
        "SELECT DISTINCT error FROM delivery_attempts WHERE tenant_id <> $1", y["id"]
    )
    assert errors and all("no DNS answer" in e["error"] for e in errors)
