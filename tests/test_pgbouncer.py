"""hookrelay behind Debian's PgBouncer in transaction mode (docs/operations/deploy.md#pgbouncer).

``DATABASE_URL`` goes through PgBouncer (``pool_mode = transaction``, fewer server
connections than clients), ``HOOKRELAY_LISTEN_DATABASE_URL`` straight to PostgreSQL.
.ci/run installs pgbouncer; under CI a missing one fails.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from hookrelay import outbox
from hookrelay.outbox.store import create_pool, dsn_through_pooler
from hookrelay.service.server.open_database import open_database
from tests.harness.pgbouncer import PgBouncer, pgbouncer_binary
from tests.harness.procs import master_key, service_env
from tests.receiver import Receiver
from tests.support import ADMIN, ADMIN_TOKEN, ServeProcess, bearer, eventually
from tests.test_streams_sse import Events

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

# Enough tasks that each API and dispatcher connection runs many transactions, on
# fewer server connections than there are clients.
TASKS = 300
# Submits and completions in flight at once.
CLIENTS = 20
# Statement names a transaction pooler loses between two transactions of one client.
LOST_STATEMENT = (asyncpg.InvalidSQLStatementNameError, asyncpg.DuplicatePreparedStatementError)


@pytest.fixture
def pgbouncer(dsn: str) -> Iterator[PgBouncer]:
    binary = pgbouncer_binary()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("pgbouncer is not installed; CI must run the PgBouncer tests (.ci/run)")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    bouncer = PgBouncer(binary, dsn)
    yield bouncer
    bouncer.stop()  # before the database is dropped: it holds server connections to it


async def _busy(pool: asyncpg.Pool, clients: int = 8, rounds: int = 100) -> None:
    """Statements with arguments from ``clients`` connections at once (each prepared)."""

    async def client(i: int) -> None:
        async with pool.acquire() as conn:
            for n in range(rounds):
                assert await conn.fetchval("SELECT $1::int + $2::int", i, n) == i + n

    await asyncio.gather(*(client(i) for i in range(clients)))


async def test_detected_and_run_without_named_statements(pgbouncer, dsn) -> None:
    bounced = pgbouncer.dsn()
    assert await dsn_through_pooler(bounced)
    assert not await dsn_through_pooler(dsn)
    # The statement cache, as asyncpg has it by default: PgBouncer loses its statements.
    # This is what users saw ("prepared statement __asyncpg_stmt_... does not exist").
    cached = await create_pool(bounced, min_size=8, max_size=8)
    try:
        with pytest.raises(LOST_STATEMENT):
            await _busy(cached)
    finally:
        await cached.close()
    # Detected (prepared_statements=None, as HOOKRELAY_PREPARED_STATEMENTS=auto passes it).
    found = await create_pool(bounced, min_size=8, max_size=8, prepared_statements=None)
    try:
        await _busy(found)
    finally:
        await found.close()


async def test_start_says_what_the_pooler_changes(pgbouncer, dsn, runtime, caplog) -> None:
    bounced = pgbouncer.dsn()
    settings = replace(runtime.settings, database_url=bounced)
    caplog.set_level(logging.INFO, logger="hookrelay")
    await open_database(replace(runtime, dsn=bounced, settings=settings))
    said = [r.getMessage() for r in caplog.records]
    assert any("pooler: prepared statements off" in m for m in said), said
    assert any("set HOOKRELAY_LISTEN_DATABASE_URL" in m for m in said), said
    # With a direct connection for LISTEN (and the migrations): nothing to warn of.
    caplog.clear()
    beside = replace(settings, listen_database_url=dsn)
    await open_database(replace(runtime, dsn=bounced, settings=beside))
    said = [r.getMessage() for r in caplog.records]
    assert any("pooler: prepared statements off" in m for m in said), said
    assert not any("HOOKRELAY_LISTEN_DATABASE_URL" in m for m in said), said


@pytest.fixture
def served(pgbouncer, dsn, tmp_path: Path) -> Iterator[ServeProcess]:
    """``hookrelay serve`` with DATABASE_URL through PgBouncer and LISTEN straight to
    PostgreSQL. The dispatcher's poll is slower than the test waits for deliveries: they
    are woken by NOTIFY, heard on the direct connection."""
    env = service_env(
        pgbouncer.dsn(),
        master_key(),
        admin_token=ADMIN_TOKEN,
        data_dir=str(tmp_path),
        listen_database_url=dsn,
        poll_interval_s="60",
        log_level="INFO",
    )
    serve = ServeProcess(env, tmp_path / "serve.log")
    serve.start()
    yield serve
    serve.stop()


async def test_serve_behind_pgbouncer_loses_nothing(served, pgbouncer, dsn, receiver) -> None:
    statuses: list[int] = []

    async def call(c: httpx.AsyncClient, method: str, url: str, **kw: Any) -> httpx.Response:
        r = await c.request(method, url, **kw)
        statuses.append(r.status_code)
        return r

    async with httpx.AsyncClient(base_url=served.url, timeout=60) as c:
        tenant = served.tenant()
        key = bearer(tenant["apiKey"])
        body = {"type": "t", "callbackUrl": receiver.url}

        # An executor of its own, through PgBouncer too, completes the task a long poll
        # waits on: the API hears of it only by NOTIFY, on its direct LISTEN.
        executors = await asyncpg.create_pool(
            pgbouncer.dsn(), min_size=1, max_size=4, statement_cache_size=0
        )
        try:
            async with c.stream("GET", "/v1/events", headers=key) as stream:
                events = Events(stream)
                assert await events.next() == {"id": "0"}
                r = await call(c, "POST", "/v1/tasks", json=body, headers=key)
                polled = r.json()["id"]
                seen = await events.next()
                assert seen and seen["json"]["status"] == "queued"
                poll = asyncio.ensure_future(
                    call(c, "GET", f"/v1/tasks/{polled}", params={"wait": "30"}, headers=key)
                )
                # Read and waiting by now (were it not, it would answer the completed task
                # at once; it cannot time out into success: after 30 s it says "queued").
                await asyncio.sleep(0.5)
                assert not poll.done()
                async with executors.acquire() as conn, conn.transaction():
                    await outbox.complete_task(conn, polled, "succeeded", result={"by": "x"})
                # Woken by the NOTIFY: answered well before its 30 s run out (when it does
                # run out, it answers the task as it is then, succeeded too).
                woke = await asyncio.wait_for(poll, 10)
                assert woke.status_code == 200 and woke.json()["status"] == "succeeded"
                # The dispatcher too: nothing else wakes it before its 60 s poll.
                await receiver.wait_for(1, timeout=20)
                # Its SSE event, through the change log read over PgBouncer.
                seen = await events.next()
                assert seen and (seen["json"]["id"], seen["json"]["status"]) == (
                    polled,
                    "succeeded",
                )

            # A few hundred more: submitted and completed through the API, CLIENTS at once.
            gate = asyncio.Semaphore(CLIENTS)

            async def one(n: int) -> str:
                async with gate:
                    r = await call(c, "POST", "/v1/tasks", json=body, headers=key)
                    assert r.status_code == 202, r.text
                    task_id: str = r.json()["id"]
                    if n % 5 == 0:  # a fifth by the executor, in its own transaction
                        async with executors.acquire() as conn, conn.transaction():
                            await outbox.complete_task(conn, task_id, "succeeded")
                    else:
                        done = {"status": "succeeded"}
                        url = f"/v1/tasks/{task_id}/complete"
                        r = await call(c, "POST", url, json=done, headers=ADMIN)
                        assert r.status_code == 200, r.text
                    return task_id

            ids = await asyncio.gather(*(one(n) for n in range(TASKS - 1)))
        finally:
            await executors.close()

        everything = {polled, *ids}
        # Within the dispatcher's 60 s poll: each delivery was woken by a NOTIFY.
        await eventually(lambda: _delivered(receiver) >= everything, 45, what="every webhook")
        direct = await asyncpg.connect(dsn)
        try:
            # The outcomes are recorded through PgBouncer too, just after each receipt.
            undelivered = "SELECT count(*) FROM tasks WHERE delivery_status <> 'delivered'"
            await eventually(lambda: _none(direct, undelivered), 30, what="every delivery recorded")
            assert await direct.fetchval("SELECT count(*) FROM outbox") == 0
            assert await direct.fetchval("SELECT count(*) FROM tasks") == TASKS
        finally:
            await direct.close()
        r = await call(c, "GET", f"/v1/tasks/{ids[-1]}", headers=key)
        assert r.json()["delivery"]["status"] == "delivered"

    assert statuses and max(statuses) < 500, sorted(set(statuses))
    assert len(receiver.received) >= TASKS
    logged = (served.logs).read_text()
    assert "Traceback" not in logged and "does not exist" not in logged, logged[-3000:]
    assert "connection pooler: prepared statements off" in logged


def _delivered(receiver: Receiver) -> set[str]:
    return {json.loads(r.body)["data"]["id"] for r in receiver.received}


async def _none(conn: asyncpg.Connection, count: str) -> bool:
    return bool(await conn.fetchval(count) == 0)
