"""Ordered delivery per key: a task's ``orderingKey`` makes the webhooks of the tenant's
tasks with that key go one at a time, in commit order, across every dispatcher.

The store-level tests drive the statements as a dispatcher does (claim, record) and
read the outbox; the last test runs three ``hookrelay dispatch`` processes against a
receiver that fails at random and checks each key's receipts against commit order.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec
import pytest
from aiohttp import web

from hookrelay.client import AsyncClient, Client
from hookrelay.outbox import complete_task
from hookrelay.outbox.models import Task
from hookrelay.outbox.ops.dead_letters import replay_one
from hookrelay.outbox.store import delivery
from hookrelay.outbox.store.delivery import ClaimedEvent, OutcomeRow
from hookrelay.outbox.tasks import GroupCommit, NewTask, create_task, get_task
from hookrelay.outbox.tasks.state_changes import event_body
from hookrelay.outbox.tenants import create_tenant
from hookrelay.service.server.prerequisites import Runtime
from tests.receiver import Receiver
from tests.support import (
    ADMIN,
    bearer,
    claim_due,
    dispatcher_env,
    eventually,
    start_dispatcher,
    wait_drained,
)
from tests.test_portal import opened

pytestmark = pytest.mark.anyio
HOOK = "http://127.0.0.1:9/hook"
TOKEN_OWNER = "test-dispatcher"


@pytest.fixture
async def tenant_id(pool: asyncpg.Pool, runtime: Runtime) -> str:
    async with pool.acquire() as conn:
        return (await create_tenant(conn, "acme", runtime.secret_box)).id


async def keyed_done(
    pool: asyncpg.Pool, tenant_id: str, key: str | None, n: int, url: str = HOOK
) -> list[str]:
    """``n`` tasks submitted with ``key`` and completed one after another; their event ids."""
    events: list[str] = []
    async with pool.acquire() as conn:
        for i in range(n):
            task, _ = await create_task(
                conn,
                tenant_id,
                NewTask(type="t", callback_url=url, input={"i": i}, ordering_key=key),
            )
            done = await complete_task(conn, task.id, "succeeded", result={"i": i})
            assert done.event_id is not None
            events.append(done.event_id)
    return events


@contextlib.asynccontextmanager
async def key_held_open(pool: asyncpg.Pool, tenant_id: str, key: str) -> AsyncIterator[Task]:
    """A task of ``key`` completed by a writer whose transaction (holding the key) stays
    open for the block and commits at its end: an executor completing inside its own."""
    async with pool.acquire() as writer:
        task, _ = await create_task(
            writer, tenant_id, NewTask(type="t", callback_url=HOOK, ordering_key=key)
        )
        async with writer.transaction():
            yield await complete_task(writer, task.id, "succeeded")


async def waiting(pool: asyncpg.Pool) -> list[tuple[str, int | None, bool]]:
    """The outbox in queue order: (event id, place in its key, due now)."""
    rows = await pool.fetch(
        "SELECT event_id, ordering_seq, next_attempt_at <> 'infinity' AS due FROM outbox "
        "ORDER BY ordering_key NULLS FIRST, ordering_seq, id"
    )
    return [(r[0], r[1], r[2]) for r in rows]


async def claim(pool: asyncpg.Pool) -> list[ClaimedEvent]:
    async with pool.acquire() as conn:
        return await claim_due(conn, limit=100, lease_s=30, owner=TOKEN_OWNER, token=uuid.uuid4())


async def record(
    pool: asyncpg.Pool, events: list[ClaimedEvent], outcome: str, held: set[int] | None = None
) -> set[int]:
    now = datetime.now(UTC)
    rows = [
        OutcomeRow(e.id, e.token, outcome, now, 500, "boom", now, 1.0, None)  # type: ignore[arg-type]
        for e in events
    ]
    keys = {e.id: k for e in events if outcome != "retry" and (k := e.key) is not None}
    async with pool.acquire() as conn:
        return await delivery.record_outcomes(
            conn,
            outcomes=rows,
            breaker_threshold=1000,
            breaker_probe_s=30,
            keys=keys,
            held=held,
        )


# -- the API ---------------------------------------------------------------------------


async def test_submit_takes_an_ordering_key_and_the_task_shows_it(client, tenant) -> None:
    headers = bearer(tenant["apiKey"])
    body = {"type": "t", "callbackUrl": HOOK, "orderingKey": "customer-42"}
    r = await client.post("/v1/tasks", json=body, headers=headers)
    assert r.status_code == 202, r.text
    assert r.json()["orderingKey"] == "customer-42"
    shown = await client.get(f"/v1/tasks/{r.json()['id']}", headers=headers)
    assert shown.json()["orderingKey"] == "customer-42"
    plain = await client.post("/v1/tasks", json={"type": "t", "callbackUrl": HOOK}, headers=headers)
    assert plain.json()["orderingKey"] is None
    page = await client.get("/v1/tasks", headers=headers)
    assert {t["orderingKey"] for t in page.json()["data"]} == {"customer-42", None}


@pytest.mark.parametrize(
    ("key", "code"),
    [
        ("", "validation_error"),
        ("k" * 201, "validation_error"),
        ("line\nbreak", "validation_error"),
        (42, "validation_error"),
        (["a"], "validation_error"),
        # PostgreSQL's text holds no NUL: refused before any field is read, as everywhere.
        ("nul\x00", "unsupported_value"),
    ],
    ids=["empty", "201 chars", "newline", "number", "array", "nul"],
)
async def test_a_bad_ordering_key_is_refused_and_writes_nothing(
    client, tenant, pool, key: Any, code: str
) -> None:
    body = {"type": "t", "callbackUrl": HOOK, "orderingKey": key}
    r = await client.post("/v1/tasks", json=body, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == code
    if code == "validation_error":
        assert "orderingKey" in r.json()["error"]["message"]
    if key == "line\nbreak":
        assert "control character" in r.json()["error"]["message"]
    assert await pool.fetchval("SELECT count(*) FROM tasks") == 0


async def test_two_hundred_characters_are_a_key(client, tenant) -> None:
    key = "é" * 200  # characters, not bytes
    body = {"type": "t", "callbackUrl": HOOK, "orderingKey": key}
    r = await client.post("/v1/tasks", json=body, headers=bearer(tenant["apiKey"]))
    assert r.status_code == 202, r.text
    assert r.json()["orderingKey"] == key


async def test_the_webhook_body_carries_the_key_as_the_task_shows_it(pool, tenant_id) -> None:
    [event] = await keyed_done(pool, tenant_id, 'quote " and \\ key', 1)
    stored = await pool.fetchval("SELECT body FROM events WHERE event_id = $1", event)
    assert msgspec.json.decode(stored)["data"]["orderingKey"] == 'quote " and \\ key'
    async with pool.acquire() as conn:
        task_id = await conn.fetchval("SELECT task_id FROM events WHERE event_id = $1", event)
        task = await get_task(conn, task_id)
    assert task is not None and task.ordering_key == 'quote " and \\ key'
    assert event_body(task) == stored  # the SQL and the Python writers agree, byte for byte


async def test_clients_send_an_ordering_key(live_api) -> None:
    url, key = live_api
    async with AsyncClient(url, key) as c:
        task = await c.submit("t", callback_url=HOOK, ordering_key="doc-7")
        assert task.ordering_key == "doc-7"
        assert (await c.get(task.id)).ordering_key == "doc-7"

    def sync_submit() -> str | None:
        with Client(url, key) as c:
            return c.submit("t", callback_url=HOOK, ordering_key="doc-8").ordering_key

    assert await asyncio.to_thread(sync_submit) == "doc-8"


# -- queueing --------------------------------------------------------------------------


async def test_only_the_head_of_a_key_is_due(pool, tenant_id) -> None:
    a = await keyed_done(pool, tenant_id, "a", 3)
    b = await keyed_done(pool, tenant_id, "b", 2)
    free = await keyed_done(pool, tenant_id, None, 2)
    assert await waiting(pool) == [
        (free[0], None, True),
        (free[1], None, True),
        (a[0], 1, True),
        (a[1], 2, False),
        (a[2], 3, False),
        (b[0], 1, True),
        (b[1], 2, False),
    ]
    claimed = {e.event_id for e in await claim(pool)}
    assert claimed == {free[0], free[1], a[0], b[0]}


async def test_a_probe_never_takes_a_parked_event(pool, tenant_id) -> None:
    """A probe of a half-open host takes any row not leased, due or held; never one
    parked behind its key. Parked rows are leased until 'infinity' besides, so the
    claims and probes of an older release (which know nothing of parking and skip
    rows whose lease has not run out) pass them over too."""
    events = await keyed_done(pool, tenant_id, "k", 3)
    [head] = await claim(pool)
    async with pool.acquire() as conn:
        probe = await delivery.claim_probe(
            conn, host=head.host, lease_s=30, owner=TOKEN_OWNER, token=uuid.uuid4()
        )
        assert probe == []
        older_rule = await conn.fetchval(
            "SELECT count(*) FROM outbox WHERE leased_until IS NULL OR leased_until <= now()"
        )
    assert older_rule == 0
    assert await waiting(pool) == [
        (events[0], 1, True),
        (events[1], 2, False),
        (events[2], 3, False),
    ]


async def test_a_recorder_writes_an_outcome_whose_key_was_held_once_it_is_free(
    pool, runtime, tenant_id
) -> None:
    from hookrelay.outbox.dispatch.attempt import AttemptResult
    from hookrelay.outbox.dispatch.circuit import BreakerPolicy
    from hookrelay.outbox.dispatch.outcomes import Recorder

    await keyed_done(pool, tenant_id, "k", 1)
    [head] = await claim(pool)
    counters: Counter[str] = Counter()
    recorder = Recorder(pool, counters, batch_size=10, breaker=BreakerPolicy())
    running = asyncio.ensure_future(recorder.run())
    async with key_held_open(pool, tenant_id, "k") as done:
        recorder.add(
            AttemptResult(
                head, "delivered", attempted_at=datetime.now(UTC), duration_ms=1.0, status_code=204
            )
        )
        await eventually(lambda: counters["key_held"] > 0, 5, what="the outcome handed back")
        assert await pool.fetchval("SELECT count(*) FROM outbox WHERE id = $1", head.id) == 1
    await eventually(lambda: counters["delivered"] == 1, 5, what="the outcome written")
    await recorder.stop()
    await running
    assert await waiting(pool) == [(done.event_id, 2, True)]


async def test_the_same_key_of_another_tenant_is_another_queue(pool, runtime, tenant_id) -> None:
    async with pool.acquire() as conn:
        other = (await create_tenant(conn, "other", runtime.secret_box)).id
    mine = await keyed_done(pool, tenant_id, "k", 2)
    theirs = await keyed_done(pool, other, "k", 2)
    claimed = {e.event_id for e in await claim(pool)}
    assert claimed == {mine[0], theirs[0]}


async def test_delivered_head_makes_the_next_due_and_retry_does_not(pool, tenant_id) -> None:
    events = await keyed_done(pool, tenant_id, "k", 3)
    [head] = await claim(pool)
    await record(pool, [head], "retry")
    assert [due for _, _, due in await waiting(pool)] == [True, False, False]
    await pool.execute("UPDATE outbox SET next_attempt_at = now() WHERE event_id = $1", events[0])
    [head] = await claim(pool)
    assert head.event_id == events[0]
    assert await claim(pool) == []  # the head is in flight: nothing else of the key goes
    await record(pool, [head], "delivered")
    assert await waiting(pool) == [(events[1], 2, True), (events[2], 3, False)]
    [nxt] = await claim(pool)
    assert nxt.event_id == events[1]


async def test_a_dead_head_is_skipped_over_and_says_so(pool, tenant_id, client) -> None:
    events = await keyed_done(pool, tenant_id, "k", 2)
    [head] = await claim(pool)
    await record(pool, [head], "dead")
    assert await waiting(pool) == [(events[1], 2, True)]
    r = await client.get(f"/v1/admin/dead-letters/{events[0]}", headers=ADMIN)
    assert r.status_code == 200, r.text
    assert (r.json()["orderingKey"], r.json()["skippedOver"]) == ("k", True)
    listed = await client.get("/v1/admin/dead-letters", headers=ADMIN)
    assert [(d["orderingKey"], d["skippedOver"]) for d in listed.json()["data"]] == [("k", True)]


async def test_the_portal_says_a_dead_letter_was_skipped_over(pool, tenant, client) -> None:
    events = await keyed_done(pool, tenant["id"], "<doc-1>", 2)
    [head] = await claim(pool)
    await record(pool, [head], "dead")
    await opened(client, tenant["apiKey"])
    page = await client.get(f"/portal/dead-letters/{events[0]}")
    assert page.status_code == 200
    assert "Ordering key</dt><dd><code>&lt;doc-1&gt;</code>: skipped over" in page.text


async def test_a_replayed_dead_letter_goes_to_the_end_of_its_key(pool, tenant_id) -> None:
    events = await keyed_done(pool, tenant_id, "k", 2)
    [head] = await claim(pool)
    await record(pool, [head], "dead")
    later = await keyed_done(pool, tenant_id, "k", 1)
    async with pool.acquire() as conn:
        await replay_one(conn, events[0], by="test")
    assert await waiting(pool) == [
        (events[1], 2, True),
        (later[0], 3, False),
        (events[0], 4, False),
    ]
    # The key empties in that order.
    for want in (events[1], later[0], events[0]):
        [e] = await claim(pool)
        assert e.event_id == want
        await record(pool, [e], "delivered")
    assert await waiting(pool) == []
    assert await pool.fetchval("SELECT pending FROM ordering_keys") == 0


async def test_a_replay_into_an_empty_key_is_due_at_once(pool, tenant_id) -> None:
    [event] = await keyed_done(pool, tenant_id, "k", 1)
    [head] = await claim(pool)
    await record(pool, [head], "dead")
    async with pool.acquire() as conn:
        await replay_one(conn, event, by="test")
    assert await waiting(pool) == [(event, 2, True)]


async def test_abandoned_head_hands_the_key_on(pool, tenant_id) -> None:
    events = await keyed_done(pool, tenant_id, "k", 2)
    [head] = await claim(pool)
    async with pool.acquire() as conn:
        done = await delivery.abandon_leases(
            conn,
            rows=[(head.id, "not to be sent")],
            token=head.token,
            keys={head.id: head.key},  # type: ignore[dict-item]
        )
    assert done == {head.id: True}
    assert await waiting(pool) == [(events[1], 2, True)]


async def test_completes_of_one_key_in_one_statement_queue_in_batch_order(
    pool, runtime, tenant_id
) -> None:
    writes = GroupCommit(pool, box=runtime.secret_box, max_running=1)
    tasks = [
        (await writes.submit(tenant_id, NewTask(type="t", callback_url=HOOK, ordering_key="k")))[0]
        for _ in range(30)
    ]
    # One complete in flight holds the batcher; the next 29 queue and go as one statement.
    done = await asyncio.gather(*(writes.complete(t.id, "succeeded") for t in tasks))
    assert writes.changes.statements < 30
    seq = {r[0]: r[1] for r in await pool.fetch("SELECT event_id, ordering_seq FROM outbox")}
    assert sorted(seq.values()) == list(range(1, 31))
    assert [seq[t.event_id] for t in done] == list(range(1, 31))  # in the order they were sent
    assert [due for _, _, due in await waiting(pool)] == [True] + [False] * 29


async def test_a_key_held_by_another_transaction_is_written_alone_after_it(
    pool, runtime, tenant_id
) -> None:
    """An executor completing a keyed task in its own transaction holds the key until it
    commits; the API's batch leaves that key's complete out (others go on) and writes it
    alone once the executor commits, behind the executor's event."""
    writes = GroupCommit(pool, box=runtime.secret_box)
    spec = NewTask(type="t", callback_url=HOOK, ordering_key="k")
    first, _ = await writes.submit(tenant_id, spec)
    second, _ = await writes.submit(tenant_id, spec)
    free, _ = await writes.submit(tenant_id, NewTask(type="t", callback_url=HOOK))
    async with pool.acquire() as conn:
        await complete_task(conn, first.id, "succeeded")  # creates the key's row
        head = await conn.fetchval("SELECT event_id FROM outbox")
        [e] = await claim(pool)
        await record(pool, [e], "delivered")
        third, _ = await writes.submit(tenant_id, spec)
        tx = conn.transaction()
        await tx.start()
        try:
            mine = await complete_task(conn, third.id, "succeeded")
            pending = asyncio.ensure_future(
                asyncio.gather(
                    writes.complete(second.id, "succeeded"), writes.complete(free.id, "succeeded")
                )
            )
            await eventually(
                lambda: pool.fetchval("SELECT count(*) FROM outbox WHERE task_id = $1", free.id),
                10,
                what="the unkeyed complete written while the key is held",
            )
            assert not pending.done()
        finally:
            await tx.commit()
    await pending
    assert head != mine.event_id
    rows = await pool.fetch("SELECT task_id, ordering_seq FROM outbox WHERE ordering_key = 'k'")
    assert {r[0]: r[1] for r in rows} == {third.id: 2, second.id: 3}


async def test_an_outcome_whose_key_a_writer_holds_waits_for_a_later_batch(pool, tenant_id) -> None:
    """An executor queueing an event of the key in a transaction still open holds the
    key: the head's outcome is not written over it (that would miss the executor's
    event, parked because the head was still there) nor waited for (that would hold up
    every tenant's outcomes); it is handed back, and written once the writer commits,
    which makes the writer's event due."""
    [first] = await keyed_done(pool, tenant_id, "k", 1)
    [head] = await claim(pool)
    free = await keyed_done(pool, tenant_id, None, 1)
    [other] = [e for e in await claim(pool) if e.event_id == free[0]]
    async with key_held_open(pool, tenant_id, "k") as done:
        held: set[int] = set()
        now = datetime.now(UTC)
        both = [
            OutcomeRow(e.id, e.token, "delivered", None, 204, None, now, 1.0, None)
            for e in (head, other)
        ]
        async with pool.acquire() as conn:
            kept = await asyncio.wait_for(
                delivery.record_outcomes(
                    conn,
                    outcomes=both,
                    breaker_threshold=1000,
                    breaker_probe_s=30,
                    keys={head.id: head.key},  # type: ignore[dict-item]
                    held=held,
                ),
                5,
            )
        assert (kept, held) == ({other.id}, {head.id})  # the unkeyed one went on
    assert await record(pool, [head], "delivered") == {head.id}
    assert await waiting(pool) == [(done.event_id, 2, True)]
    assert first == head.event_id


async def test_the_sweep_releases_a_key_whose_head_left_without_handing_it_on(
    pool, tenant_id
) -> None:
    events = await keyed_done(pool, tenant_id, "k", 3)
    # As a process of an earlier release would: the head gone, the key not handed on.
    await pool.execute("DELETE FROM outbox WHERE event_id = $1", events[0])
    assert await claim(pool) == []
    async with pool.acquire() as conn:
        assert await delivery.release_stuck_keys(conn) == [events[1]]
        assert await delivery.release_stuck_keys(conn) == []  # nothing stuck now
    assert await waiting(pool) == [(events[1], 2, True), (events[2], 3, False)]
    assert await pool.fetchval("SELECT pending FROM ordering_keys") == 2


async def test_retention_removes_keys_with_nothing_waiting(pool, tenant_id) -> None:
    from hookrelay.outbox.ops.retention import purge

    await keyed_done(pool, tenant_id, "done", 1)
    await keyed_done(pool, tenant_id, "waiting", 2)
    [a, b] = await claim(pool)
    [done] = [e for e in (a, b) if e.ordering_key == "done"]
    await record(pool, [done], "delivered")
    *_, keys = await purge(pool, attempts_older_than_s=86400, tasks_older_than_s=86400)
    assert keys == 1
    assert await pool.fetchval("SELECT array_agg(ordering_key) FROM ordering_keys") == ["waiting"]
    # Gone, the key starts again at place 1, alone and due.
    [again] = await keyed_done(pool, tenant_id, "done", 1)
    assert (again, 1, True) in await waiting(pool)


async def test_the_sweep_leaves_a_key_with_its_head_in_flight(pool, tenant_id) -> None:
    await keyed_done(pool, tenant_id, "k", 2)
    await claim(pool)
    async with pool.acquire() as conn:
        assert await delivery.release_stuck_keys(conn) == []
    assert [due for _, _, due in await waiting(pool)] == [True, False]


# -- end to end ------------------------------------------------------------------------

KEYS, PER_KEY, FAILING = 20, 200, 0.3


@pytest.mark.slow
async def test_three_dispatchers_keep_each_key_in_commit_order(pool, runtime, dsn) -> None:
    """20 keys x 200 tasks, a receiver failing 30 % at random, three dispatcher processes:
    every key's webhooks arrive in commit order, one at a time (a request for the next
    task of a key only after the previous one was answered 2xx)."""
    rng = random.Random(36)
    sent: dict[str, list[tuple[int, bool]]] = defaultdict(list)  # key -> (index, answered 2xx)
    in_flight: dict[str, int] = defaultdict(int)
    overlap = []

    async def flaky(request: web.Request, rx: Receiver) -> web.StreamResponse:
        data = msgspec.json.decode(rx.received[-1].body)["data"]
        key = data["orderingKey"]
        in_flight[key] += 1
        if in_flight[key] > 1:
            overlap.append(key)
        try:
            await asyncio.sleep(rng.random() * 0.003)
            ok = rng.random() >= FAILING
            sent[key].append((data["input"]["i"], ok))
            return web.Response(status=204 if ok else 500)
        finally:
            in_flight[key] -= 1

    rx = await Receiver(behaviour=flaky).start()
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "acme", runtime.secret_box)
    writes = GroupCommit(pool, box=runtime.secret_box)
    keys = [f"key-{k}" for k in range(KEYS)]

    async def one_key(key: str) -> None:
        # Each key's tasks completed one after another: commit order is index order.
        for i in range(PER_KEY):
            spec = NewTask(type="t", callback_url=rx.url, input={"i": i}, ordering_key=key)
            task, _ = await writes.submit(tenant.id, spec)
            await writes.complete(task.id, "succeeded")

    env = dispatcher_env(runtime, dsn, max_attempts="100", retry_base_s="0.01", retry_cap_s="0.05")
    procs = [await start_dispatcher(env) for _ in range(3)]
    try:
        started = asyncio.get_running_loop().time()
        await asyncio.gather(*(one_key(k) for k in keys))
        await wait_drained(pool, timeout=240)
        took = asyncio.get_running_loop().time() - started
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            await p.wait()
        await rx.stop()
    assert not overlap, f"two webhooks of one key were in flight at once: {overlap[:5]}"
    for key in keys:
        order = sent[key]
        delivered = [i for i, ok in order if ok]
        assert delivered == list(range(PER_KEY)), f"{key}: delivered out of commit order"
        # Never a request for task i+1 before task i was answered 2xx.
        highest_ok = -1
        for i, ok in order:
            assert i <= highest_ok + 1, (
                f"{key}: task {i} sent before task {highest_ok + 1} delivered"
            )
            if ok:
                highest_ok = max(highest_ok, i)
    failed = sum(1 for order in sent.values() for _, ok in order if not ok)
    print(
        f"\nordered: {KEYS} keys x {PER_KEY} tasks, {len(rx.received)} requests "
        f"({failed} answered 500), 3 dispatchers, {took:.1f} s"
    )
    assert await pool.fetchval("SELECT sum(pending) FROM ordering_keys") == 0
