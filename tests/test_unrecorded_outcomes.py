"""An outcome that cannot be written after a failed POST (issue 31, part 5).

Our peers' users saw an attempt log lost and then an endless retry loop (Outpost #1000,
#663). Here the write of a batch of outcomes fails inside the database: a trigger on
``delivery_attempts`` raises while the outcome statement runs, after that statement
has already rescheduled the event. The attempt row and ``next_attempt_at`` are saved
together or not at all; the event is retried after its lease; the attempt budget
still ends in a dead letter. And an outcome that can never be written no longer sends
the event round at every lease expiry for ever at no cost: after a few leases lost
in a row it is dead-lettered, saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import asyncpg
import pytest
from aiohttp import web

from hookrelay.outbox.dispatch.dispatcher import Dispatcher, running
from hookrelay.outbox.ops.dead_letters import replay_one
from hookrelay.outbox.store import delivery
from hookrelay.outbox.store.delivery import ClaimedEvent
from hookrelay.service.server.background import make_dispatcher
from tests.receiver import Receiver
from tests.support import backlog, claim_due, eventually, wait_drained

pytestmark = pytest.mark.anyio

# The write fails for an event listed in fault_events: once (a sequence counts, and
# sequences do not roll back with the failed statement), or always.
FAULT = """
CREATE TABLE fault_events (event_id text PRIMARY KEY, always boolean NOT NULL);
CREATE SEQUENCE fault_hits;
CREATE FUNCTION fail_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    always_fail boolean;
BEGIN
    SELECT f.always INTO always_fail FROM fault_events f WHERE f.event_id = NEW.event_id;
    IF always_fail OR (always_fail IS NOT NULL AND nextval('fault_hits') = 1) THEN
        RAISE EXCEPTION 'injected: the outcome of % cannot be written', NEW.event_id;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER fail_outcome BEFORE INSERT ON delivery_attempts
    FOR EACH ROW EXECUTE FUNCTION fail_outcome();
"""


async def answer_500(request: web.Request, rx: Receiver) -> web.StreamResponse:
    return web.Response(status=500)


@contextlib.asynccontextmanager
async def dispatching(pool: asyncpg.Pool, runtime: Any, **config: Any) -> AsyncIterator[Dispatcher]:
    """A dispatcher with one-second leases (a lost outcome is retried soon)."""
    rt = replace(runtime, settings=replace(runtime.settings, lease_s=1.0, http_timeout_s=0.5))
    d = make_dispatcher(rt, pool)
    d.config = replace(d.config, **config)
    async with running(d):
        yield d


async def test_a_failed_outcome_write_saves_nothing_and_the_budget_still_ends(
    pool, runtime, caplog
) -> None:
    rx = await Receiver(behaviour=answer_500).start()
    try:
        _, [event] = await backlog(pool, runtime, rx.url, 1)
        await pool.execute(FAULT)
        await pool.execute("INSERT INTO fault_events VALUES ($1, false)", event)
        due = await pool.fetchval("SELECT next_attempt_at FROM outbox")
        with caplog.at_level(logging.ERROR, logger="hookrelay.dispatcher"):
            async with dispatching(pool, runtime) as d:
                await eventually(lambda: d.counters["unrecorded"] == 1)
                # The statement that failed had rescheduled the row and logged the
                # attempt: neither is there, the row is as it was claimed.
                row = await pool.fetchrow(
                    "SELECT attempts, budget_used, next_attempt_at, lease_token FROM outbox"
                )
                assert (row["attempts"], row["budget_used"]) == (0, 0)
                assert row["next_attempt_at"] == due and row["lease_token"] is not None
                assert await pool.fetchval("SELECT count(*) FROM delivery_attempts") == 0
                # After the lease, the event is tried again, and each attempt counts.
                await wait_drained(pool)
        assert "cannot record outcome" in caplog.text
    finally:
        await rx.stop()
    letter = await pool.fetchrow("SELECT attempts, last_error FROM dead_letters")
    assert letter["attempts"] == 3  # HOOKRELAY_MAX_ATTEMPTS in the tests
    log = await pool.fetch("SELECT number, outcome FROM delivery_attempts ORDER BY number")
    assert [(r["number"], r["outcome"]) for r in log] == [(1, "retry"), (2, "retry"), (3, "dead")]
    # Four POSTs: the one whose outcome was lost, then the budget of three.
    assert len(rx.received) == 4
    task = await pool.fetchrow("SELECT delivery_status, delivery_attempts FROM tasks")
    assert (task["delivery_status"], task["delivery_attempts"]) == ("dead", 3)


async def test_an_outcome_that_can_never_be_written_is_dead_lettered_not_sent_for_ever(
    pool, runtime, caplog
) -> None:
    rx = await Receiver(behaviour=answer_500).start()
    try:
        _, [poisoned, other] = await backlog(pool, runtime, rx.url, 2)
        await pool.execute(FAULT)
        await pool.execute("INSERT INTO fault_events VALUES ($1, true)", poisoned)
        with caplog.at_level(logging.ERROR, logger="hookrelay.dispatcher"):
            async with dispatching(pool, runtime, max_lost_leases=2) as d:
                await wait_drained(pool)
                counters = Counter(d.counters)
    finally:
        await rx.stop()
    sent = Counter(rx.event_ids())
    # The other event's budget, as usual; the poisoned one sent twice, once per lease
    # it lost, then dead-lettered without being sent again.
    assert sent == {other: 3, poisoned: 2}
    assert counters["unrecorded"] == 2 and counters["abandoned"] == 1
    letter = await pool.fetchrow("SELECT * FROM dead_letters WHERE event_id = $1", poisoned)
    assert letter["attempts"] == 0  # none recorded
    assert "outcome could not be recorded" in letter["last_error"]
    assert "2 leases" in letter["last_error"]
    task = await pool.fetchrow(
        "SELECT delivery_status, last_error, next_attempt_at FROM tasks WHERE event_id = $1",
        poisoned,
    )
    assert task["delivery_status"] == "dead" and task["next_attempt_at"] is None
    assert task["last_error"] == letter["last_error"]
    assert "event dead-lettered: outcome could not be recorded: 2 leases" in caplog.text
    # A replay starts afresh: once the fault is gone, the event goes out again.
    await pool.execute("DELETE FROM fault_events")
    rx = await Receiver().start()
    try:
        async with pool.acquire() as conn:
            await replay_one(conn, poisoned, by="test")
            await conn.execute("UPDATE outbox SET callback_url = $1", rx.url)
        assert await pool.fetchval("SELECT lost_leases FROM outbox") == 0
        async with dispatching(pool, runtime, max_lost_leases=2):
            await wait_drained(pool)
    finally:
        await rx.stop()
    assert rx.event_ids() == [poisoned]


async def test_lost_leases_count_leases_that_ran_out_in_a_row(pool, runtime) -> None:
    """A lease that ran out with nothing written counts, and so does an attempt that
    failed with a bug of ours; a row given back for another local fault does not, and
    a recorded outcome starts the count again."""
    await backlog(pool, runtime, "http://127.0.0.1:9/h", 1)

    async def claim(lease_s: float = 60) -> ClaimedEvent:
        async with pool.acquire() as conn:
            [e] = await claim_due(conn, limit=1, lease_s=lease_s, owner="t", token=uuid4())
        return e

    async def lose() -> ClaimedEvent:
        """Claim, and let the lease run out."""
        e = await claim(lease_s=0.01)
        await asyncio.sleep(0.05)
        return e

    async def give_back(e: ClaimedEvent, *, bug: bool) -> None:
        async with pool.acquire() as conn:
            await delivery.defer_leases(conn, ids=[e.id], token=e.token, delay_s=0, counted=bug)

    assert (await lose()).lost_leases == 0
    assert (await lose()).lost_leases == 1  # the first lease ran out
    e = await claim()
    assert e.lost_leases == 2
    await give_back(e, bug=False)  # e.g. out of file descriptors: not the event's doing
    e = await claim()
    assert e.lost_leases == 2
    await give_back(e, bug=True)
    e = await claim()
    assert e.lost_leases == 3
    async with pool.acquire() as conn:
        await delivery.record_outcomes(
            conn,
            outcomes=[
                delivery.OutcomeRow(
                    e.id,
                    e.token,
                    "retry",
                    datetime.now(UTC),
                    500,
                    "HTTP 500",
                    datetime.now(UTC),
                    1.0,
                    None,
                )
            ],
            breaker_threshold=10_000,
            breaker_probe_s=1.0,
        )
    assert await pool.fetchval("SELECT lost_leases FROM outbox") == 0
