"""Lanes end to end: claim counts, fair shares with hosts that never answer, held rows."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime

import asyncpg
import pytest
from aiohttp import web

from hookrelay.outbox import complete_task
from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.store import delivery
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from tests.receiver import Receiver
from tests.support import backlog, dispatcher, eventually, wait_drained

pytestmark = pytest.mark.anyio


class Blackhole:
    """Accepts connections and never answers; counts the requests it holds open."""

    def __init__(self) -> None:
        self.open = self.peak = 0
        self._server: asyncio.Server | None = None
        self._gone = asyncio.Event()

    async def start(self) -> Blackhole:
        self._server = await asyncio.start_server(self._hold, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/hook"

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.peak = max(self.peak, self.open)
        try:
            reads = asyncio.ensure_future(reader.read())  # until the client gives up
            await asyncio.wait(
                [reads, asyncio.ensure_future(self._gone.wait())], return_when="FIRST_COMPLETED"
            )
        finally:
            self.open -= 1
            writer.close()

    def hang_up(self) -> None:
        """Close every held connection and each new one at once (test teardown)."""
        self._gone.set()

    async def stop(self) -> None:
        assert self._server is not None
        self.hang_up()
        self._server.close()


async def test_one_host_claims_each_row_once_and_keeps_its_slots_busy(
    pool, runtime, receiver
) -> None:
    in_flight = {"now": 0, "peak": 0}

    async def slowish(request: web.Request, rx: Receiver) -> web.StreamResponse:
        in_flight["now"] += 1
        in_flight["peak"] = max(in_flight["peak"], in_flight["now"])
        await asyncio.sleep(0.005)
        in_flight["now"] -= 1
        return web.Response(status=204)

    receiver.behaviour = slowish
    await backlog(pool, runtime, receiver.url, 400)
    async with running(dispatcher(runtime, pool)) as d:
        await wait_drained(pool, timeout=60)
    # Default caps: 20 to one host. Every row claimed was delivered, none given back;
    # once the lane delivered, rows were leased ahead to take its freed slots at once.
    assert d.counters["delivered"] == d.counters["claimed"] == 400
    assert d.counters["released"] == 0
    assert d.counters["claimed_ahead"] > 0
    assert in_flight["peak"] <= 20


async def test_rows_waiting_ahead_are_given_back_at_shutdown(pool, runtime, receiver) -> None:
    async def steady(request: web.Request, rx: Receiver) -> web.StreamResponse:
        await asyncio.sleep(0.02)
        return web.Response(status=204)

    receiver.behaviour = steady
    await backlog(pool, runtime, receiver.url, 400)
    d = dispatcher(runtime, pool)
    async with running(d):
        await eventually(lambda: d.counters["claimed_ahead"] > 0)
    # Stopped with rows waiting ahead: they went back unspent, nothing stays leased.
    assert d.counters["released"] > 0
    leased = await pool.fetchval("SELECT count(*) FROM outbox WHERE lease_token IS NOT NULL")
    assert leased == 0
    attempts = await pool.fetchval("SELECT count(*) FROM delivery_attempts")
    left = await pool.fetchval("SELECT count(*) FROM outbox WHERE attempts = 0")
    assert attempts == d.counters["delivered"] and attempts + left == 400


async def test_hanging_hosts_of_one_tenant_do_not_starve_another(pool, runtime, receiver) -> None:
    rt = replace(
        runtime,
        settings=replace(
            runtime.settings,
            concurrency=20,
            per_host_concurrency=4,
            tenant_concurrency=5,
            http_timeout_s=30.0,
            lease_s=60.0,
        ),
    )
    holes = [await Blackhole().start() for _ in range(6)]
    try:
        x = None
        for hole in holes:
            x, _ = await backlog(pool, rt, hole.url, 10, x)
        async with running(dispatcher(rt, pool)):
            while sum(h.open for h in holes) < 18:
                await asyncio.sleep(0.02)
            # X alone took every slot but the reserve (2 of 20), spread over its hosts.
            await asyncio.sleep(0.2)
            assert sum(h.open for h in holes) == 18 and max(h.peak for h in holes) <= 4
            _, fast = await backlog(pool, rt, receiver.url, 30)
            # Y is served from the reserve while every one of X's requests still hangs.
            await receiver.wait_for(30, timeout=20)
            assert set(fast) == set(receiver.event_ids())
            assert sum(h.open for h in holes) == 18
            for hole in holes:
                hole.hang_up()  # so stopping does not wait out X's deadlines
    finally:
        for hole in holes:
            await hole.stop()


async def test_tenants_whose_hosts_never_answer_do_not_starve_another(
    pool, runtime, receiver
) -> None:
    """Five tenants, each under its cap with a host of its own that never answers, attack
    while another tenant flows: its complete→receipt p99 stays within a second.

    The attempts' deadline (30 s) is far beyond the test: only the scheduler can save it.
    """
    rt = replace(
        runtime,
        settings=replace(
            runtime.settings,
            concurrency=20,
            per_host_concurrency=4,
            tenant_concurrency=5,
            http_timeout_s=30.0,
            lease_s=60.0,
        ),
    )
    rate, flowing_s, attack_after_s = 20, 3.0, 0.5
    holes = [await Blackhole().start() for _ in range(5)]
    async with pool.acquire() as conn:
        normal = await create_tenant(conn, "normal", rt.secret_box)
        flow = [
            (await create_task(conn, normal.id, NewTask("t", receiver.url)))[0].id
            for _ in range(int(rate * flowing_s))
        ]
        attack = []
        for i, hole in enumerate(holes):
            tenant = await create_tenant(conn, f"attacker-{i}", rt.secret_box)
            for _ in range(8):  # twice its host's cap
                attack.append((await create_task(conn, tenant.id, NewTask("t", hole.url)))[0].id)
    attacked_at = float("inf")

    async def strike() -> None:
        nonlocal attacked_at
        await asyncio.sleep(attack_after_s)
        async with pool.acquire() as conn, conn.transaction():
            for task_id in attack:
                await complete_task(conn, task_id, "succeeded")
        attacked_at = time.time()

    try:
        async with running(dispatcher(rt, pool)):
            try:
                striker = asyncio.create_task(strike())
                t0 = time.monotonic()
                async with pool.acquire() as conn:
                    for i, task_id in enumerate(flow):
                        await asyncio.sleep(max(0.0, i / rate - (time.monotonic() - t0)))
                        await complete_task(conn, task_id, "succeeded")
                await striker
                await receiver.wait_for(len(flow), timeout=10)
                # The attackers hold every slot but the reserve (2 of 20), all still hanging.
                assert sum(h.open for h in holes) == 18
            finally:
                for hole in holes:
                    hole.hang_up()  # so stopping does not wait out the attackers' deadlines
    finally:
        for hole in holes:
            await hole.stop()
    during = [
        r.at - committed
        for r in receiver.received
        if (committed := _committed_at(r.body)) >= attacked_at
    ]
    assert len(during) >= rate * (flowing_s - attack_after_s) - rate  # most of the flow
    p99 = sorted(during)[min(len(during) - 1, int(0.99 * len(during)))]
    assert p99 <= 1.0, sorted(during)[-5:]


def _committed_at(body: bytes) -> float:
    """The event's commit time (its body's ``timestamp``), as unix seconds."""
    return datetime.fromisoformat(json.loads(body)["timestamp"]).timestamp()


async def test_held_rows_leave_the_lanes_and_return_when_the_host_answers(pool, runtime) -> None:
    url = "https://down.example/hook"
    await backlog(pool, runtime, url, 5)
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO destinations (host, state, consecutive_failures, probe_at) "
            "VALUES ('https://down.example:443', 'open', 10, now() + interval '1 hour')"
        )
        [lane] = await delivery.due_lanes(conn, upto=20)
        assert (lane.host, lane.state, lane.due) == ("https://down.example:443", "open", 5)
        await delivery.hold_lanes(conn, hosts=["https://down.example:443"], hold_s=3600)
        assert await delivery.due_lanes(conn, upto=20) == []
        held_until = await conn.fetchval(
            "SELECT held_until FROM destinations WHERE host = 'https://down.example:443'"
        )
        assert held_until is not None
        assert await conn.fetchval("SELECT bool_and(next_attempt_at = $1) FROM outbox", held_until)
        # The probe takes a held row; its success puts the others back at once.
        token = uuid.uuid4()
        [probe] = await delivery.claim_probe(
            conn, host="https://down.example:443", lease_s=30, owner="t", token=token
        )
        now = datetime.now(UTC)
        ok = delivery.OutcomeRow(probe.id, token, "delivered", None, 204, None, now, 1.0, None)
        await delivery.record_outcomes(
            conn, outcomes=[ok], breaker_threshold=10, breaker_probe_s=30
        )
        [lane] = await delivery.due_lanes(conn, upto=20)
        assert (lane.state, lane.due) == ("closed", 4)
        assert await conn.fetchval("SELECT held_until FROM destinations") is None


async def test_claim_reads_no_held_row(pool, runtime) -> None:
    """A due lane's claim and the lane scan read a handful of buffers, held rows or not."""
    tenant, _ = await backlog(pool, runtime, "https://up.example/hook", 3)
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO events (event_id, tenant_id, task_id, event_type, body)"
            " SELECT 'evt_held_' || i, $1, 'task_x', 'task.succeeded', '{}'"
            " FROM generate_series(1, 2000) i",
            tenant.id,
        )
        await conn.execute(
            "INSERT INTO outbox (event_id, tenant_id, task_id, event_type, callback_url, host)"
            " SELECT 'evt_held_' || i, $1, 'task_x', 'task.succeeded',"
            " 'https://down.example/hook', 'https://down.example:443'"
            " FROM generate_series(1, 2000) i",
            tenant.id,
        )
        await conn.execute(
            "INSERT INTO destinations (host, state, consecutive_failures, probe_at) "
            "VALUES ('https://down.example:443', 'open', 10, now() + interval '1 hour')"
        )
        await delivery.hold_lanes(conn, hosts=["https://down.example:443"], hold_s=3600)
        await conn.execute("ANALYZE outbox")
        lanes = await delivery.due_lanes(conn, upto=20)
        assert [(x.host, x.due) for x in lanes] == [("https://up.example:443", 3)]
        assert await _rows_read(conn, "due_lanes", 20) < 50


async def _rows_read(conn: asyncpg.Connection, name: str, *args: object) -> int:
    """Heap and index tuples the statement touched, from EXPLAIN ANALYZE's row counts."""
    from hookrelay.outbox.sql import sql

    plan = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql(name)}", *args)
    import json

    total = 0

    def walk(node: dict[str, object]) -> None:
        nonlocal total
        if "Scan" in str(node.get("Node Type", "")):
            total += int(node.get("Actual Rows", 0)) * int(node.get("Actual Loops", 1))  # type: ignore[call-overload]
            total += int(node.get("Rows Removed by Filter", 0))  # type: ignore[call-overload]
        for child in node.get("Plans", []):  # type: ignore[attr-defined]
            walk(child)

    walk((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
    return total


async def test_a_manual_close_puts_held_rows_back(pool, runtime) -> None:
    from hookrelay.outbox.store import console

    await backlog(pool, runtime, "https://down.example/hook", 3)
    host = "https://down.example:443"
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO destinations (host, state, consecutive_failures, probe_at) "
            "VALUES ($1, 'open', 10, now() + interval '1 hour')",
            host,
        )
        await delivery.hold_lanes(conn, hosts=[host], hold_s=3600)
        assert await delivery.due_lanes(conn, upto=20) == []
        assert await console.close_circuit(conn, host=host)
        [lane] = await delivery.due_lanes(conn, upto=20)
        assert (lane.host, lane.state, lane.due) == (host, "closed", 3)


async def test_a_claim_rewrites_its_rows_in_place(pool, runtime) -> None:
    """The lease is in no index and each page keeps room for one more version (0011):
    a claim's UPDATE is HOT, and the lane scan skips the leased rows."""
    await backlog(pool, runtime, "https://up.example/hook", 50)
    async with pool.acquire() as conn, conn.transaction():
        [lane] = await delivery.due_lanes(conn, upto=100)
        assert lane.due == 50
        rows = await delivery.claim_lanes(
            conn,
            lanes=[(lane.host, lane.tenant_id, 20)],
            lease_s=30,
            owner="t",
            token=uuid.uuid4(),
        )
        hot = await conn.fetchval("SELECT pg_stat_get_xact_tuples_hot_updated('outbox'::regclass)")
        [lane] = await delivery.due_lanes(conn, upto=100)
    assert len(rows) == 20 and hot == 20
    assert lane.due == 30
