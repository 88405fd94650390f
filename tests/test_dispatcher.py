"""The dispatcher end to end: real PostgreSQL, a real receiver on 127.0.0.1, real HTTP."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import replace

import asyncpg
import pytest
from aiohttp import web

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.store import delivery
from hookrelay.outbox.store.pool import create_pool
from hookrelay.outbox.tenants import rotate_secret
from hookrelay.receiver import BadSignature, verify
from tests.receiver import Receiver
from tests.support import (
    backlog,
    claim_due,
    dispatcher,
    eventually,
    v1_secret,
    wait_drained,
)

pytestmark = pytest.mark.anyio


def expected_signature(secret: str, headers: dict[str, str], body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


async def database_away(*args, **kwargs):
    raise ConnectionResetError("the database went away")


async def test_delivers_signed_webhook(pool, runtime, receiver) -> None:
    tenant, [event_id] = await backlog(pool, runtime, receiver.url, 1)
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(1)
        await wait_drained(pool)
    got = receiver.received[0]
    h = {k.lower(): v for k, v in got.headers.items()}
    assert h["content-type"] == "application/json"
    assert h["webhook-id"] == event_id
    assert abs(int(h["webhook-timestamp"]) - time.time()) < 10
    assert h["webhook-signature"] == expected_signature(v1_secret(tenant), h, got.body)
    body = json.loads(got.body)
    assert body["type"] == "task.succeeded" and body["data"]["status"] == "succeeded"
    assert set(body) == {"type", "timestamp", "data"}
    # No delivery block: it changes with every attempt, and the body may not.
    assert "delivery" not in body["data"]
    assert body["data"]["updatedAt"] == body["data"]["completedAt"] == body["timestamp"]
    stored = await pool.fetchval("SELECT body FROM events WHERE event_id = $1", event_id)
    assert got.body == stored.encode()  # the bytes stored at commit, as they are
    task = await pool.fetchrow("SELECT * FROM tasks WHERE event_id = $1", event_id)
    assert task["delivery_status"] == "delivered" and task["delivery_attempts"] == 1
    assert task["delivered_at"] is not None and task["last_status_code"] == 204
    log = await pool.fetch("SELECT * FROM delivery_attempts WHERE event_id = $1", event_id)
    assert [(r["number"], r["outcome"], r["status_code"]) for r in log] == [(1, "delivered", 204)]


async def test_retries_then_delivers(pool, runtime, receiver) -> None:
    async def flaky(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=500 if len(rx.received) <= 2 else 200, text="nope")

    receiver.behaviour = flaky
    _, [event_id] = await backlog(pool, runtime, receiver.url, 1)
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(3)
        await wait_drained(pool)
    assert receiver.event_ids() == [event_id] * 3  # same webhook-id on every retry
    assert len({r.body for r in receiver.received}) == 1  # and the same body
    log = await pool.fetch(
        "SELECT number, outcome, status_code, response_prefix FROM delivery_attempts "
        "WHERE event_id = $1 ORDER BY number",
        event_id,
    )
    assert [(r["number"], r["outcome"], r["status_code"]) for r in log] == [
        (1, "retry", 500),
        (2, "retry", 500),
        (3, "delivered", 200),
    ]
    assert log[0]["response_prefix"] == "nope"


async def test_exhausted_goes_to_dead_letters(pool, runtime, receiver) -> None:
    async def broken(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=502)

    receiver.behaviour = broken
    _, [event_id] = await backlog(pool, runtime, receiver.url, 1)
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(3)
        await wait_drained(pool)
    dead = await pool.fetchrow("SELECT * FROM dead_letters WHERE event_id = $1", event_id)
    assert dead["attempts"] == 3 and dead["last_status_code"] == 502
    assert "gave up after 3" in dead["last_error"]
    task = await pool.fetchrow("SELECT * FROM tasks WHERE event_id = $1", event_id)
    assert task["delivery_status"] == "dead" and task["delivery_attempts"] == 3
    assert len(receiver.received) == 3


async def test_410_is_dead_after_one_attempt(pool, runtime, receiver) -> None:
    async def gone(request: web.Request, rx: Receiver) -> web.StreamResponse:
        return web.Response(status=410)

    receiver.behaviour = gone
    _, [event_id] = await backlog(pool, runtime, receiver.url, 1)
    async with running(dispatcher(runtime, pool)):
        await wait_drained(pool)
    assert len(receiver.received) == 1
    assert await pool.fetchval("SELECT attempts FROM dead_letters WHERE event_id=$1", event_id) == 1


async def test_slow_drip_is_cut_at_total_deadline(pool, runtime, receiver) -> None:
    async def drip(request: web.Request, rx: Receiver) -> web.StreamResponse:
        resp = web.StreamResponse(status=200)
        await resp.prepare(request)
        for _ in range(60):
            await resp.write(b"x")
            await asyncio.sleep(1)
        return resp

    receiver.behaviour = drip
    rt = replace(runtime, settings=replace(runtime.settings, http_timeout_s=1.5, max_attempts=1))
    _, [event_id] = await backlog(pool, rt, receiver.url, 1)
    started = time.monotonic()
    async with running(dispatcher(rt, pool)):
        await wait_drained(pool)
    assert time.monotonic() - started < 6
    row = await pool.fetchrow("SELECT * FROM delivery_attempts WHERE event_id = $1", event_id)
    assert "timed out after 1.5s" in row["error"] and 1400 < row["duration_ms"] < 3000


async def test_endless_body_is_cut_at_cap(pool, runtime, receiver) -> None:
    async def endless(request: web.Request, rx: Receiver) -> web.StreamResponse:
        resp = web.StreamResponse(status=200)
        await resp.prepare(request)
        chunk = b"y" * 65536
        with_sent = 0
        while with_sent < 200 * 1024 * 1024:
            await resp.write(chunk)
            with_sent += len(chunk)
        return resp

    receiver.behaviour = endless
    rt = replace(runtime, settings=replace(runtime.settings, max_response_bytes=10_000))
    _, [event_id] = await backlog(pool, rt, receiver.url, 1)
    async with running(dispatcher(rt, pool)):
        await wait_drained(pool)
    row = await pool.fetchrow("SELECT * FROM delivery_attempts WHERE event_id = $1", event_id)
    assert row["outcome"] == "delivered" and row["response_prefix"].startswith("yyy")
    assert row["duration_ms"] < 2000


async def test_private_destination_dead_letters_unless_allowlisted(pool, runtime, receiver):
    _, events = await backlog(pool, runtime, receiver.url, 1)
    localhost_url = receiver.url.replace("127.0.0.1", "localhost")
    _, more = await backlog(pool, runtime, localhost_url, 1)
    strict = replace(runtime, settings=replace(runtime.settings, allow_private_cidrs=""))
    async with running(dispatcher(strict, pool)):
        await wait_drained(pool)
    assert receiver.received == []
    rows = await pool.fetch("SELECT event_id, attempts, last_error FROM dead_letters")
    assert {r["event_id"] for r in rows} == {*events, *more}
    for r in rows:
        assert r["attempts"] == 1 and "refused" in r["last_error"]


async def test_stale_lease_holder_cannot_record(pool, runtime, receiver) -> None:
    """Dispatcher A's lease expires, B takes the row over; A's late outcome is dropped."""
    _, [event_id] = await backlog(pool, runtime, receiver.url, 1)
    token_a, token_b = uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        [row] = await claim_due(conn, limit=10, lease_s=0.05, owner="a", token=token_a)
        await asyncio.sleep(0.1)  # A stalls past its lease
        [row_b] = await claim_due(conn, limit=10, lease_s=30.0, owner="b", token=token_b)
        assert row_b.id == row.id
        now = await conn.fetchval("SELECT now()")

        async def record(token: uuid.UUID) -> set[int]:
            outcome = delivery.OutcomeRow(
                row.id, token, "delivered", None, 200, None, now, 1.0, None
            )
            return await delivery.record_outcomes(
                conn, outcomes=[outcome], breaker_threshold=10, breaker_probe_s=30.0
            )

        assert await record(token_a) == set()
        assert await conn.fetchval("SELECT lease_owner FROM outbox WHERE id=$1", row.id) == "b"
        assert await conn.fetchval("SELECT count(*) FROM delivery_attempts") == 0
        assert await record(token_b) == {row.id}
        assert await conn.fetchval("SELECT count(*) FROM outbox") == 0


async def test_leased_rows_are_not_claimed_twice(pool, runtime, receiver) -> None:
    await backlog(pool, runtime, receiver.url, 5)
    async with pool.acquire() as conn:
        a = await claim_due(conn, limit=3, lease_s=30.0, owner="a", token=uuid.uuid4())
        b = await claim_due(conn, limit=10, lease_s=30.0, owner="b", token=uuid.uuid4())
        assert len(a) == 3 and len(b) == 2
        assert not {e.id for e in a} & {e.id for e in b}
        assert await claim_due(conn, limit=10, lease_s=30.0, owner="c", token=uuid.uuid4()) == []


async def test_two_dispatchers_share_a_backlog(pool, runtime, receiver) -> None:
    _, events = await backlog(pool, runtime, receiver.url, 300)
    one, two = dispatcher(runtime, pool), dispatcher(runtime, pool)
    async with running(one), running(two):
        await wait_drained(pool, timeout=60)
    assert set(receiver.event_ids()) == set(events)
    assert one.counters["delivered"] > 0 and two.counters["delivered"] > 0
    assert one.counters["delivered"] + two.counters["delivered"] == 300
    dupes = await pool.fetchval(
        "SELECT count(*) FROM (SELECT event_id, number FROM delivery_attempts "
        "GROUP BY 1, 2 HAVING count(*) > 1) d"
    )
    assert dupes == 0
    assert await pool.fetchval("SELECT count(*) FROM delivery_attempts") == 300


async def test_per_host_cap_keeps_other_hosts_flowing(pool, runtime, receiver) -> None:
    stuck = await Receiver().start()
    release = asyncio.Event()

    async def hang(request: web.Request, rx: Receiver) -> web.StreamResponse:
        await release.wait()
        return web.Response(status=204)

    stuck.behaviour = hang
    try:
        rt = replace(
            runtime,
            settings=replace(
                runtime.settings,
                per_host_concurrency=2,
                concurrency=10,
                http_timeout_s=4.0,
                lease_s=8.0,
            ),
        )
        tenant, _ = await backlog(pool, rt, stuck.url, 20)
        _, fast = await backlog(pool, rt, receiver.url, 20, tenant)
        async with running(dispatcher(rt, pool)) as d:
            await receiver.wait_for(20, timeout=10)
            assert len(stuck.received) <= 2  # never more than the cap in flight
            release.set()
            await wait_drained(pool, timeout=60)
        assert set(fast) <= set(receiver.event_ids())
        assert d.counters["delivered"] == 40
    finally:
        release.set()
        await stuck.stop()


async def test_per_host_cap_counts_every_spelling_of_one_receiver(pool, runtime) -> None:
    stuck = await Receiver().start()
    release = asyncio.Event()

    async def hang(request: web.Request, rx: Receiver) -> web.StreamResponse:
        await release.wait()
        return web.Response(status=204)

    stuck.behaviour = hang
    spellings = ["127.0.0.1", "[::ffff:127.0.0.1]", "[0:0:0:0:0:ffff:7f00:1]"]
    try:
        rt = replace(
            runtime,
            settings=replace(runtime.settings, per_host_concurrency=2, concurrency=20),
        )
        tenant = None
        for host in spellings:
            tenant, _ = await backlog(pool, rt, f"http://{host}:{stuck.port}/hook", 5, tenant)
        keys = await pool.fetch("SELECT DISTINCT host FROM outbox")
        assert [k["host"] for k in keys] == [f"http://127.0.0.1:{stuck.port}"]
        async with running(dispatcher(rt, pool)) as d:
            await stuck.wait_for(2)
            await asyncio.sleep(0.5)  # room for a wrongly keyed third connection
            assert len(stuck.received) == 2
            release.set()
            await wait_drained(pool, timeout=30)
        assert d.counters["delivered"] == 15
    finally:
        release.set()
        await stuck.stop()


async def test_shutdown_releases_nothing_leased(pool, runtime, receiver) -> None:
    async def slow(request: web.Request, rx: Receiver) -> web.StreamResponse:
        await asyncio.sleep(0.3)
        return web.Response(status=204)

    receiver.behaviour = slow
    await backlog(pool, runtime, receiver.url, 50)
    d = dispatcher(runtime, pool)
    async with running(d):
        await receiver.wait_for(5)
    # Stopped mid-backlog: what was in flight finished, nothing stays leased.
    leased = await pool.fetchval("SELECT count(*) FROM outbox WHERE lease_token IS NOT NULL")
    assert leased == 0
    delivered = await pool.fetchval("SELECT count(*) FROM delivery_attempts")
    assert delivered == d.counters["delivered"] > 0


async def test_rotation_signs_with_both_then_only_new(pool, runtime, receiver) -> None:
    rt = replace(runtime, settings=replace(runtime.settings, secret_overlap_s=1.5))
    tenant, _ = await backlog(pool, rt, receiver.url, 0)
    async with pool.acquire() as conn:
        new = v1_secret(await rotate_secret(conn, tenant.id, rt.secret_box, 1.5))
    async with running(dispatcher(rt, pool)):
        await backlog(pool, rt, receiver.url, 1, tenant)
        await receiver.wait_for(1)
        await asyncio.sleep(1.8)  # the overlap ends
        await backlog(pool, rt, receiver.url, 1, tenant)
        await receiver.wait_for(2)
    during, after = receiver.received
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    verify(during.headers, during.body, secrets=[v1_secret(tenant)])
    verify(during.headers, during.body, secrets=[new])
    assert len(after.headers["webhook-signature"].split(" ")) == 1
    verify(after.headers, after.body, secrets=[new])
    with pytest.raises(BadSignature):
        verify(after.headers, after.body, secrets=[v1_secret(tenant)])


@pytest.mark.slow
async def test_survives_its_connections_being_killed(pool, runtime, receiver, dsn) -> None:
    async def slow(request: web.Request, rx: Receiver) -> web.StreamResponse:
        await asyncio.sleep(0.02)
        return web.Response(status=204)

    receiver.behaviour = slow
    _, events = await backlog(pool, runtime, receiver.url, 200)
    await pool.close()
    # Killed during asyncpg's SSL probe (sslmode=prefer, its default), a connect leaves
    # a future inside asyncpg whose exception nobody retrieves, which the test runner
    # reports as an error of its own; the dispatcher recovers either way. Without the
    # probe, what is tested is only the dispatcher.
    dsn = f"{dsn}{'&' if '?' in dsn else '?'}sslmode=disable"
    runtime = replace(runtime, dsn=dsn)
    own_pool = await create_pool(dsn, min_size=2, max_size=4)
    killer = await asyncpg.connect(dsn)
    kill_all = (
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    try:
        async with running(dispatcher(runtime, own_pool)):
            killed = 0
            for _ in range(5):
                await asyncio.sleep(0.15)
                killed += await killer.fetchval(kill_all)
            await eventually(lambda: killer.fetchval("SELECT count(*) = 0 FROM outbox"), 30)
        assert killed >= 5
        assert await killer.fetchval("SELECT count(*) FROM outbox") == 0
        leased = "SELECT count(*) FROM outbox WHERE lease_token IS NOT NULL"
        assert await killer.fetchval(leased) == 0
    finally:
        await killer.close()
        await own_pool.close()
    assert set(receiver.event_ids()) == set(events)


async def test_a_slot_goes_on_with_its_lane_after_an_attempt_times_out(
    pool, runtime, receiver
) -> None:
    """A busy lane's slot is one task sending row after row: an attempt cut at its
    deadline ends that attempt only, and the same slot goes on with the next rows."""
    hung = 0

    async def first_few_hang(request: web.Request, rx: Receiver) -> web.StreamResponse:
        nonlocal hung
        if hung < 3:
            hung += 1
            await asyncio.sleep(30)
        return web.Response(status=204)

    receiver.behaviour = first_few_hang
    settings = replace(
        runtime.settings, http_timeout_s=0.5, per_host_concurrency=2, retry_base_s=0.05
    )
    rt = replace(runtime, settings=settings)
    _, ids = await backlog(pool, rt, receiver.url, 40)
    d = dispatcher(rt, pool)
    async with running(d):
        await wait_drained(pool)
    attempts = await pool.fetch("SELECT event_id, outcome, error FROM delivery_attempts")
    timed_out = [a for a in attempts if a["outcome"] == "retry"]
    assert len(timed_out) == 3 and all("timed out after 0.5s" in a["error"] for a in timed_out)
    assert sum(a["outcome"] == "delivered" for a in attempts) == 40
    assert d.counters["delivered"] == 40 and d.counters["retry"] == 3
    # Rows were sent from the lane's rows ahead, by the slots' own tasks.
    assert d.counters["claimed_ahead"] > 0


async def test_a_bug_in_a_claim_round_does_not_stop_the_dispatcher(
    pool, runtime, receiver, caplog
) -> None:
    d = dispatcher(runtime, pool)
    real, failed = d._claim_round, list[int]()

    async def buggy(look: bool) -> bool:
        if not failed:
            failed.append(1)
            raise KeyError("a bug")
        return await real(look)

    d._claim_round = buggy  # type: ignore[method-assign]
    _, [event_id] = await backlog(pool, runtime, receiver.url, 1)
    async with running(d):
        await receiver.wait_for(1)
        await wait_drained(pool)
    assert failed and receiver.event_ids() == [event_id]
    assert "claim round failed" in caplog.text


async def test_a_wake_up_during_a_claim_round_is_not_lost(pool, runtime, receiver) -> None:
    # An event committed while the dispatcher is claiming: its NOTIFY arrives mid-round.
    # The dispatcher must look again at once, not at the next poll (a minute here).
    slow_poll = replace(runtime, settings=replace(runtime.settings, poll_interval_s=60))
    d = dispatcher(slow_poll, pool)
    real, rounds = d._claim_round, list[float]()

    async def notified_meanwhile(look: bool) -> bool:
        full = await real(look)
        rounds.append(time.monotonic())
        if len(rounds) == 1:
            _, [event_id] = await backlog(pool, runtime, receiver.url, 1)
            ids.append(event_id)
            d._notified("")  # what the listener calls for that commit's NOTIFY
        return full

    ids: list[str] = []
    d._claim_round = notified_meanwhile  # type: ignore[method-assign]
    async with running(d):
        await receiver.wait_for(1, timeout=10)
    assert receiver.event_ids() == ids


async def test_a_bug_in_an_attempt_gives_the_row_back_counted(
    pool, runtime, receiver, monkeypatch
) -> None:
    from hookrelay.outbox.dispatch import dispatcher as dispatcher_module

    async def buggy(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(dispatcher_module, "attempt", buggy)
    _, [event_id] = await backlog(pool, runtime, receiver.url, 1)
    d = dispatcher(runtime, pool)
    async with running(d):
        row = await eventually(
            lambda: pool.fetchrow(
                "SELECT * FROM outbox WHERE event_id = $1 AND lost_leases = 1", event_id
            )
        )
    assert row["lease_token"] is None and row["attempts"] == 0
    assert receiver.received == []
    assert await pool.fetchval("SELECT count(*) FROM delivery_attempts") == 0


async def test_a_dispatcher_leaves_a_sender_it_was_lent_open(pool, runtime, receiver) -> None:
    from hookrelay.outbox.dispatch.dispatcher import Dispatcher

    base = dispatcher(runtime, pool)
    lent = Dispatcher(pool, runtime.dsn, base.sender, runtime.secret_box, base.config)
    await backlog(pool, runtime, receiver.url, 1)
    try:
        async with running(lent):
            await receiver.wait_for(1)
            await wait_drained(pool)
        assert (await base.sender.post(receiver.url, b"{}", {}, 100)).status == 204
    finally:
        await base.sender.aclose()


async def test_a_row_that_cannot_be_given_back_stays_leased_unspent(
    pool, runtime, receiver, monkeypatch, caplog
) -> None:
    from hookrelay.outbox.dispatch import dispatcher as dispatcher_module
    from hookrelay.outbox.errors import LocalFault

    async def out_of_fds(*args, **kwargs):
        raise LocalFault("out_of_fds", "too many open files")

    monkeypatch.setattr(dispatcher_module, "attempt", out_of_fds)
    monkeypatch.setattr(delivery, "defer_leases", database_away)
    _, [event_id] = await backlog(pool, runtime, receiver.url, 1)
    async with running(dispatcher(runtime, pool)):
        await eventually(lambda: "could not give back event" in caplog.text)
    row = await pool.fetchrow("SELECT * FROM outbox WHERE event_id = $1", event_id)
    assert row["lease_token"] is not None and row["attempts"] == 0 and row["lost_leases"] == 0
    assert receiver.received == []


async def test_a_row_not_to_be_sent_is_not_sent_when_it_cannot_be_dead_lettered(
    pool, runtime, receiver, monkeypatch, caplog
) -> None:
    monkeypatch.setattr(delivery, "abandon_leases", database_away)
    _, [event_id] = await backlog(pool, runtime, receiver.url, 1)
    await pool.execute("UPDATE outbox SET lost_leases = 5 WHERE event_id = $1", event_id)
    async with running(dispatcher(runtime, pool)):
        await eventually(lambda: "could not dead-letter 1 events" in caplog.text)
    assert receiver.received == []
    assert await pool.fetchval("SELECT count(*) FROM dead_letters") == 0
    assert await pool.fetchval("SELECT count(*) FROM outbox WHERE event_id = $1", event_id) == 1


@pytest.mark.parametrize("release_works", [True, False])
async def test_stop_cancels_an_attempt_past_its_deadline_and_gives_the_row_back(
    pool, runtime, receiver, monkeypatch, release_works
) -> None:
    from hookrelay.outbox.dispatch import dispatcher as dispatcher_module
    from hookrelay.outbox.dispatch.attempt import AttemptLimits

    started = asyncio.Event()

    async def stuck(*args, **kwargs):
        started.set()
        await asyncio.Event().wait()  # a bug: the attempt ignores its deadline

    monkeypatch.setattr(dispatcher_module, "attempt", stuck)
    _, [event_id] = await backlog(pool, runtime, receiver.url, 1)
    d = dispatcher(runtime, pool)
    d.config = replace(d.config, limits=AttemptLimits(total_timeout_s=0.1))
    if not release_works:
        monkeypatch.setattr(delivery, "release_leases", database_away)
    async with running(d):
        await asyncio.wait_for(started.wait(), 10)
    row = await pool.fetchrow("SELECT * FROM outbox WHERE event_id = $1", event_id)
    # Released, or (the database away) left to its lease running out.
    assert (row["lease_token"] is None) is release_works and row["attempts"] == 0
    assert d.counters["released"] == int(release_works)
    assert await pool.fetchval("SELECT count(*) FROM delivery_attempts") == 0


async def test_a_wake_with_its_lane_claims_without_reading_every_lane(
    pool, runtime, receiver, monkeypatch
) -> None:
    """``serve``: the API hands its dispatcher each new event's lane; the claim goes
    straight to that lane (one statement, not two). A hint that finds nothing due
    drops out, and a look still reads every lane."""
    tenant, [event_id] = await backlog(pool, runtime, receiver.url, 1)
    host = await pool.fetchval("SELECT host FROM outbox WHERE event_id = $1", event_id)
    reads: list[int] = []
    real = delivery.due_lanes

    async def counted(conn, *, upto):
        reads.append(upto)
        return await real(conn, upto=upto)

    monkeypatch.setattr(delivery, "due_lanes", counted)
    d = dispatcher(runtime, pool)
    d._loop = asyncio.get_running_loop()
    d._looked = False
    try:
        d.wake((host, tenant.id))
        await d._claim_round(look=False)
        assert reads == [] and d.counters["claimed"] == 1
        await receiver.wait_for(1)
        assert receiver.event_ids() == [event_id]
        # A lane with nothing due (another dispatcher took it): claimed from once, then
        # forgotten, not claimed from again and again.
        d.wake(("elsewhere.example", tenant.id))
        await d._claim_round(look=False)
        assert reads == [] and d._lanes == [] and not d._hinted
        await d._claim_round(look=True)
        assert len(reads) == 1
    finally:
        await d._drain()
        await d.recorder.stop()
        await d.recorder.run()
        await d.sender.aclose()
