"""The outcome recorder: batches, the fence on stale leases, and what it does when a write fails."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from hookrelay.outbox.dispatch import outcomes as recorder_module
from hookrelay.outbox.dispatch.attempt import AttemptResult
from hookrelay.outbox.dispatch.circuit import BreakerPolicy
from hookrelay.outbox.dispatch.outcomes import Recorder
from hookrelay.outbox.models import Outcome
from hookrelay.outbox.store.delivery import ClaimedEvent
from tests.support import backlog, claim_due, eventually

pytestmark = pytest.mark.anyio


async def leased(pool: asyncpg.Pool, runtime: Any, n: int) -> list[ClaimedEvent]:
    """``n`` outbox rows leased by this test, as the dispatcher would hold them."""
    await backlog(pool, runtime, "http://127.0.0.1:9/hook", n)
    async with pool.acquire() as conn:
        events = await claim_due(conn, limit=n, lease_s=60, owner="test", token=uuid.uuid4())
    assert len(events) == n
    return events


def result(event: ClaimedEvent, outcome: Outcome = "delivered", **kw: Any) -> AttemptResult:
    return AttemptResult(
        event, outcome, attempted_at=datetime.now(UTC), duration_ms=3.0, status_code=204, **kw
    )


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each batch handed to the store; no pause between retries."""
    sizes: list[int] = []
    real = getattr(recorder_module, "record_outcomes")  # noqa: B009 (a name it imports)

    async def spy(conn: asyncpg.Connection, *, outcomes: list[Any], **kw: Any) -> Any:
        sizes.append(len(outcomes))
        return await real(conn, outcomes=outcomes, **kw)

    monkeypatch.setattr(recorder_module, "record_outcomes", spy)
    monkeypatch.setattr(recorder_module, "RETRY_PAUSE_S", 0.01)
    return sizes


def failing(monkeypatch: pytest.MonkeyPatch, errors: list[BaseException]) -> None:
    """The next ``len(errors)`` writes raise these, in turn; later ones go through."""
    real = getattr(recorder_module, "record_outcomes")  # noqa: B009 (a name it imports)

    async def flaky(conn: asyncpg.Connection, **kw: Any) -> Any:
        if errors:
            raise errors.pop(0)
        return await real(conn, **kw)

    monkeypatch.setattr(recorder_module, "record_outcomes", flaky)


@contextlib.asynccontextmanager
async def recording(
    pool: asyncpg.Pool, results: list[AttemptResult], batch_size: int = 100
) -> AsyncIterator[tuple[Recorder, Counter[str]]]:
    """A running recorder already holding ``results``; stopped (and flushed) on exit."""
    counters: Counter[str] = Counter()
    rec = Recorder(pool, counters, batch_size=batch_size, breaker=BreakerPolicy())
    for r in results:
        rec.add(r)
    task = asyncio.create_task(rec.run())
    try:
        yield rec, counters
    finally:
        await rec.stop()
        await asyncio.wait_for(task, 30)


async def outbox_count(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM outbox"))


async def test_outcomes_are_written_in_batches_of_batch_size(pool, runtime, calls) -> None:
    events = await leased(pool, runtime, 7)
    async with recording(pool, [result(e) for e in events], batch_size=3) as (_, counters):
        await eventually(lambda: counters["delivered"] == 7)
    assert calls == [3, 3, 1]
    assert await outbox_count(pool) == 0
    assert await pool.fetchval("SELECT count(*) FROM delivery_attempts") == 7


async def test_stop_flushes_what_is_pending(pool, runtime, calls) -> None:
    events = await leased(pool, runtime, 5)
    counters: Counter[str] = Counter()
    rec = Recorder(pool, counters, batch_size=2, breaker=BreakerPolicy())
    for e in events:
        rec.add(result(e, "retry", next_at=datetime.now(UTC)))
    await rec.stop()  # before it ever ran: it still writes everything, then returns
    await asyncio.wait_for(rec.run(), 30)
    assert counters == Counter(retry=5) and calls == [2, 2, 1]
    assert await pool.fetchval("SELECT count(*) FROM outbox WHERE lease_token IS NULL") == 5


async def test_an_outcome_under_a_lost_lease_is_stale(pool, runtime, calls) -> None:
    [mine, lost] = await leased(pool, runtime, 2)
    # Another dispatcher holds ``lost`` now: our token no longer matches the row's.
    stale = result(replace(lost, token=uuid.uuid4()))
    async with recording(pool, [result(mine), stale]) as (_, counters):
        await eventually(lambda: sum(counters.values()) == 2)
    assert counters == Counter(delivered=1, stale=1)
    assert await pool.fetchval("SELECT event_id FROM outbox") == lost.event_id


async def test_a_poisoned_outcome_splits_the_batch_and_is_dropped_alone(
    pool, runtime, calls, caplog
) -> None:
    events = await leased(pool, runtime, 4)
    # A NUL byte in a text column is refused by PostgreSQL: not transient, not retryable.
    poisoned = result(events[2], "retry", error="bad\x00answer", next_at=datetime.now(UTC))
    batch = [result(e) for e in events[:2]] + [poisoned, result(events[3])]
    with caplog.at_level(logging.ERROR, logger="hookrelay.dispatcher"):
        async with recording(pool, batch) as (_, counters):
            await eventually(lambda: sum(counters.values()) == 4)
    assert calls == [4, 1, 1, 1, 1], "the batch is retried one outcome at a time"
    assert counters == Counter(delivered=3, unrecorded=1)
    assert "cannot record outcome" in caplog.text
    # Its row stays leased: the lease runs out and the event is attempted again.
    row = await pool.fetchrow("SELECT event_id, attempts, lease_token FROM outbox")
    assert row["event_id"] == events[2].event_id and row["attempts"] == 0
    assert row["lease_token"] == events[2].token


@pytest.mark.parametrize(
    "error",
    [
        ConnectionResetError("connection reset"),  # transient: the server went away
        asyncpg.exceptions.InternalClientError("reset mid-query"),  # anything else
    ],
    ids=["transient", "unexpected"],
)
async def test_a_failed_write_is_retried_until_it_lands(
    pool, runtime, calls, monkeypatch, error
) -> None:
    events = await leased(pool, runtime, 3)
    failing(monkeypatch, [error, error])
    async with recording(pool, [result(e) for e in events]) as (_, counters):
        await eventually(lambda: counters["delivered"] == 3)
    assert await outbox_count(pool) == 0


@pytest.mark.parametrize(
    "error",
    [
        asyncpg.exceptions.DeadlockDetectedError("deadlock detected"),
        asyncpg.exceptions.SerializationError("could not serialize access"),
    ],
    ids=["deadlock-victim", "serialization-failure"],
)
async def test_an_outcome_rolled_back_by_the_server_is_written_again(
    pool, runtime, calls, monkeypatch, error
) -> None:
    # The server cancelled the transaction, not the outcome's fault: dropping it would
    # send its event a second time once the lease runs out.
    events = await leased(pool, runtime, 1)
    failing(monkeypatch, [error])
    async with recording(pool, [result(events[0])]) as (_, counters):
        await eventually(lambda: counters["delivered"] == 1)
    assert counters["unrecorded"] == 0
    assert await outbox_count(pool) == 0


async def test_at_shutdown_unwritable_outcomes_are_dropped(
    pool, runtime, monkeypatch, caplog
) -> None:
    events = await leased(pool, runtime, 2)
    monkeypatch.setattr(recorder_module, "RETRY_PAUSE_S", 0.01)
    attempts = 0

    async def down(conn: asyncpg.Connection, **kw: Any) -> Any:
        nonlocal attempts
        attempts += 1
        raise ConnectionRefusedError("database down")

    monkeypatch.setattr(recorder_module, "record_outcomes", down)
    with caplog.at_level(logging.ERROR, logger="hookrelay.dispatcher"):
        async with recording(pool, [result(e) for e in events]) as (_, counters):
            await eventually(lambda: attempts >= 2)  # retrying while running
    assert not counters
    assert "dropping 2 unrecorded outcomes at shutdown" in caplog.text
    # Nothing was written: both rows are still leased, to be retried after the lease.
    assert await pool.fetchval("SELECT count(*) FROM outbox WHERE lease_token IS NOT NULL") == 2


async def test_while_outcomes_pour_in_batches_wait_longer_to_grow(pool, runtime) -> None:
    rows = await leased(pool, runtime, recorder_module.BUSY_AT + 1)
    counters: Counter[str] = Counter()
    rec = Recorder(pool, counters, batch_size=100, breaker=BreakerPolicy())
    for r in rows[: recorder_module.BUSY_AT]:  # a burst, in one batch
        rec.add(result(r))
    task = asyncio.create_task(rec.run())
    try:
        await eventually(lambda: counters["delivered"] == recorder_module.BUSY_AT)
        assert rec._busy  # the next batch may wait BUSY_LINGER_S to fill up
        rec.add(result(rows[-1]))
        await eventually(lambda: counters["delivered"] == recorder_module.BUSY_AT + 1)
        assert not rec._busy  # a batch of one: back to LINGER_S
    finally:
        await rec.stop()
        await asyncio.wait_for(task, 30)
    assert counters == Counter(delivered=recorder_module.BUSY_AT + 1)
