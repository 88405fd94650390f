"""/metrics: delivery counters and database gauges in the Prometheus text format."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from hookrelay.outbox.dispatch.dispatcher import running
from tests.receiver import Receiver
from tests.support import ADMIN, backlog, dispatcher, eventually, wait_drained

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


def value(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in metrics")


async def test_metrics_after_deliveries_and_dead_letters(client, pool, runtime) -> None:
    async def gone(request: web.Request, rx: Receiver) -> web.StreamResponse:
        data = json.loads(await request.read())["data"]
        return web.Response(status=410 if data["result"] == {"i": 0} else 204)

    rx = await Receiver(behaviour=gone).start()
    try:
        before = (await client.get("/metrics", headers=ADMIN)).text
        delivered_before = (
            value(before, 'hookrelay_deliveries_total{outcome="delivered"}')
            if 'outcome="delivered"' in before
            else 0
        )
        tenant, _ = await backlog(pool, runtime, rx.url, 3)
        queued = (await client.get("/metrics", headers=ADMIN)).text
        assert value(queued, "hookrelay_outbox_depth") == 3
        assert value(queued, 'hookrelay_tasks{status="succeeded"}') == 3
        async with running(dispatcher(runtime, pool)):
            await wait_drained(pool)
    finally:
        await rx.stop()
    r = await client.get("/metrics", headers=ADMIN)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert value(text, "hookrelay_outbox_depth") == 0
    assert value(text, "hookrelay_outbox_oldest_due_seconds") == 0
    assert value(text, f'hookrelay_dead_letters{{tenant="{tenant.id}"}}') == 1
    assert value(text, 'hookrelay_deliveries_total{outcome="delivered"}') == delivered_before + 2
    assert value(text, "hookrelay_attempt_duration_seconds_count") >= 3


async def test_oldest_transaction_gauge_sees_an_idle_transaction(client, dsn) -> None:
    import asyncpg

    series = "hookrelay_db_oldest_transaction_seconds"
    idle = await asyncpg.connect(dsn)
    try:
        await idle.execute("BEGIN")
        await idle.fetchval("SELECT txid_current()")

        async def a_second_old() -> bool:
            return value((await client.get("/metrics", headers=ADMIN)).text, series) >= 1.0

        await eventually(a_second_old)
    finally:
        await idle.close()
    assert value((await client.get("/metrics", headers=ADMIN)).text, series) < 1.0


async def test_build_info_names_the_release(client) -> None:
    from importlib.metadata import version

    text = (await client.get("/metrics", headers=ADMIN)).text
    assert value(text, f'hookrelay_build_info{{version="{version("hookrelay-server")}"}}') == 1
