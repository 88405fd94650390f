"""Store functions whose behaviour no route or dispatcher test pins down on its own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from hookrelay.outbox import complete_task
from hookrelay.outbox.errors import IdempotencyInFlight
from hookrelay.outbox.models import EventId, TaskId, TenantId
from hookrelay.outbox.store import delivery, destinations, events, metrics, tasks, tenants

pytestmark = pytest.mark.anyio
TENANT = TenantId("ten_store")


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    async with pool.acquire() as conn:
        await tenants.insert_tenant(conn, tenant_id=TENANT, name="store", api_key_hash=b"h")
        yield conn


async def finished_task(conn: asyncpg.Connection, n: int, url: str) -> TaskId:
    """A succeeded task whose event waits in the outbox."""
    task = await tasks.insert_task(
        conn,
        task_id=TaskId(f"task_{n}"),
        tenant_id=TENANT,
        type="t",
        input=None,
        callback_url=url,
        metadata=None,
        timeout_s=None,
    )
    await complete_task(conn, task.id, "succeeded")
    return task.id


async def test_claim_skips_open_circuits_and_a_probe_takes_its_host(
    conn: asyncpg.Connection,
) -> None:
    await finished_task(conn, 1, "https://a.example/in")
    await finished_task(conn, 2, "https://b.example/in")
    await conn.execute(
        "INSERT INTO destinations (host, state, consecutive_failures) "
        "VALUES ('https://a.example:443', 'open', 10)"
    )
    lanes = await delivery.due_lanes(conn, upto=10)
    assert {(x.host, x.state, x.due) for x in lanes} == {
        ("https://a.example:443", "open", 1),
        ("https://b.example:443", "closed", 1),
    }
    normal = await delivery.claim_lanes(
        conn,
        lanes=[(x.host, x.tenant_id, 10) for x in lanes],
        lease_s=30.0,
        owner="x",
        token=uuid.uuid4(),
    )
    assert [e.host for e in normal] == ["https://b.example:443"]
    assert isinstance(normal[0].body, bytes) and normal[0].budget_used == 0
    probe = await delivery.claim_probe(
        conn, host="https://a.example:443", lease_s=30.0, owner="x", token=uuid.uuid4()
    )
    assert [e.host for e in probe] == ["https://a.example:443"]


async def test_a_due_probe_is_granted_once(conn: asyncpg.Connection) -> None:
    await conn.execute(
        "INSERT INTO destinations (host, state, consecutive_failures, probe_at) "
        "VALUES ('a.example', 'open', 10, now() - interval '1 s')"
    )
    assert await destinations.take_probes(conn, probe_s=30.0) == ["a.example"]
    assert await destinations.take_probes(conn, probe_s=30.0) == []
    [dest] = await destinations.list_destinations(conn, limit=10)
    assert dest.state == "half-open" and dest.consecutive_failures == 10 and dest.held == 0


async def test_attempts_of_a_task_or_of_one_of_its_events(conn: asyncpg.Connection) -> None:
    task_id = await finished_task(conn, 1, "https://a.example/in")
    now = datetime.now(UTC)
    for event_id, number in (("evt_1", 2), ("evt_1", 1), ("evt_2", 3)):
        await conn.execute(
            "INSERT INTO delivery_attempts (event_id, task_id, tenant_id, number, attempted_at,"
            " duration_ms, outcome) VALUES ($1, $2, $3, $4, $5, 1.0, 'retry')",
            event_id,
            task_id,
            TENANT,
            number,
            now,
        )
    every = await events.attempts(conn, task_id=task_id)
    assert [(a.event_id, a.number) for a in every] == [("evt_1", 1), ("evt_1", 2), ("evt_2", 3)]
    one = await events.attempts(conn, task_id=task_id, event_id=EventId("evt_2"))
    assert [(a.event_id, a.number) for a in one] == [("evt_2", 3)]


async def test_an_idempotency_key_stored_twice_is_in_flight(conn: asyncpg.Connection) -> None:
    def submit(task_id: str, request_hash: bytes):
        return tasks.insert_task(
            conn,
            task_id=TaskId(task_id),
            tenant_id=TENANT,
            type="t",
            input=None,
            callback_url="https://a.example/in",
            metadata=None,
            timeout_s=None,
            idempotency=("k", request_hash),
        )

    first = await submit("task_k1", b"1")
    with pytest.raises(IdempotencyInFlight):
        await submit("task_k2", b"2")
    seen = await tasks.idempotency_get(conn, tenant_id=TENANT, key="k")
    assert seen is not None and seen.request_hash == b"1" and seen.task == first
    assert await conn.fetchval("SELECT count(*) FROM tasks WHERE id = 'task_k2'") == 0


async def test_gauges(conn: asyncpg.Connection, pool: asyncpg.Pool) -> None:
    await finished_task(conn, 1, "https://a.example/in")
    await tasks.insert_task(
        conn,
        task_id=TaskId("task_q"),
        tenant_id=TENANT,
        type="t",
        input=None,
        callback_url="https://a.example/in",
        metadata=None,
        timeout_s=None,
    )
    assert await metrics.tasks_by_status(conn) == {"succeeded": 1, "queued": 1}
    stats = await metrics.outbox_stats(conn)
    assert stats.depth == 1 and stats.oldest_due_s >= 0
    assert await metrics.dead_letters_by_tenant(conn) == {}
    async with pool.acquire() as other, other.transaction():
        await other.execute("SELECT txid_current()")
        assert await metrics.oldest_transaction_s(conn) > 0


async def test_claim_overdue_tasks_takes_only_live_ones(conn: asyncpg.Connection) -> None:
    for n in (1, 2):
        await tasks.insert_task(
            conn,
            task_id=TaskId(f"task_{n}"),
            tenant_id=TENANT,
            type="t",
            input=None,
            callback_url="https://a.example/in",
            metadata=None,
            timeout_s=0.000001,
        )
    await complete_task(conn, "task_2", "succeeded")
    async with conn.transaction():
        assert await tasks.claim_overdue_tasks(conn, limit=10) == ["task_1"]
