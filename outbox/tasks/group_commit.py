"""Group commit in the application: the API's concurrent writes as one statement each.

Every write of the API is one statement under autocommit, and what it costs is mostly
per statement, not per row: the driver's work, a round trip, a commit (a WAL flush).
So the submits that arrive together go to PostgreSQL as one ``insert_tasks``, and
the starts, completes and cancels as one ``finish_tasks`` (progress reports as one
``report_progresses``); each request is answered with its own row.

:class:`Batcher` does the gathering, with no added wait: a request finding a free
slot goes out within the event-loop turn it arrived in, so a lone one is sent at
once; only while ``max_running`` statements are in flight do the next requests
queue, and the first slot to free takes them all (up to ``max_batch``) as one.
Batches form under load, not before.

Per row, everything is as it is alone (``create_task``, ``complete_task``,
``report_progress``): the guarded transition, idempotency keys, the outbox row and
body fixed by the same statement. A batch never holds two writes of one task (or
two submits of one key): the later waits for the next batch, so they apply in order.
A row that the statement did not change (refused, a task of an older release, or one
another transaction holds locked, which the statement skips rather than wait for) is
written alone through the single-row function, on a connection of its own while the
next batch goes out: it raises its refusal, writes the task the older way, or waits
for the lock without holding anybody else up. A statement the database refuses
(one bad row fails it whole, writing nothing) is retried row by row the same way, so
one bad row fails only its own request.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar, cast

import asyncpg

from hookrelay.outbox import ids, tracing
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.models import (
    LIVE_STATUSES,
    TERMINAL,
    EventId,
    Task,
    TaskStatus,
    TerminalStatus,
)
from hookrelay.outbox.store import TRANSIENT_ERRORS
from hookrelay.outbox.store import tasks as store
from hookrelay.outbox.tasks.progress import check_progress, write_progress
from hookrelay.outbox.tasks.submit import (
    Created,
    Idempotency,
    NewTask,
    Submission,
    create_task,
    create_tasks,
)
from hookrelay.outbox.tasks.transitions import write_completion, write_start

__all__ = ["MAX_BATCH", "MAX_RUNNING", "Alone", "Batcher", "GroupCommit"]

I = TypeVar("I")  # noqa: E741 (the item of a batch)
R = TypeVar("R")

# The most rows one statement carries: past a few hundred a bigger batch saves little
# and makes its requests wait longer for their answer.
MAX_BATCH = 256
# Statements of one kind in flight at once. One: a request arriving while a statement
# is out waits for it (about a millisecond) and goes with everything that arrived
# meanwhile. Measured (python -m bench quick's write path, 20 clients): one in flight
# cost 208-215 µs of API CPU per write, two 312-334 µs and four 289-327 µs, with as
# many writes a second or more; with more slots the batches hardly form.
MAX_RUNNING = 1


class Alone(Generic[R]):
    """An item its batch did not write (refused, locked by another transaction, or
    failed by a neighbour's error): ``write`` does it alone, on a connection of its
    own, while the next batch goes out. Its key stays taken until it is done."""

    __slots__ = ("write",)

    def __init__(self, write: Callable[[], Awaitable[R]]) -> None:
        self.write = write


class Batcher(Generic[I, R]):
    """Concurrent :meth:`__call__` calls run as batches of ``run``.

    ``run`` takes a list of items and returns one result per item, in order: a value,
    an exception to raise for that item alone, or :class:`Alone`. ``key`` names what
    two items may not share while either is being written (a task id): the later one
    goes in a later batch.
    """

    def __init__(
        self,
        run: Callable[[list[I]], Awaitable[list[R | Exception | Alone[R]]]],
        *,
        key: Callable[[I], Hashable | None] = lambda _: None,
        max_batch: int = MAX_BATCH,
        max_running: int = MAX_RUNNING,
    ) -> None:
        self._run, self._key = run, key
        self._max_batch, self._max_running = max_batch, max_running
        self._queue: collections.deque[tuple[I, asyncio.Future[R]]] = collections.deque()
        self._running = 0
        self._busy: set[Hashable] = set()  # the keys of the batches running now
        self._flushing = False
        # What it did, for tests and the shutdown log: statements sent, the rows they
        # carried, and the rows written alone.
        self.statements = 0
        self.rows = 0
        self.alone = 0

    async def __call__(self, item: I) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if not self._flushing and self._running < self._max_running:
            # Once the requests already runnable in this turn of the loop have queued
            # theirs too: they share this statement. In a context of its own, not this
            # request's (its span, say), which the batch's task would inherit.
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush, context=contextvars.Context())
        return await future

    def _flush(self) -> None:
        self._flushing = False
        while self._queue and self._running < self._max_running:
            batch = self._take()
            if not batch:  # all that waits has its key in a running batch
                break
            self._running += 1
            asyncio.ensure_future(self._go(batch))

    def _take(self) -> list[tuple[I, asyncio.Future[R]]]:
        batch: list[tuple[I, asyncio.Future[R]]] = []
        later: list[tuple[I, asyncio.Future[R]]] = []
        while self._queue and len(batch) < self._max_batch:
            entry = self._queue.popleft()
            if entry[1].done():  # its request was cancelled while it queued
                continue
            key = self._key(entry[0])
            if key is not None:
                # Its key is in this batch or in one still running: after that one.
                if key in self._busy:
                    later.append(entry)
                    continue
                self._busy.add(key)
            batch.append(entry)
        self._queue.extendleft(reversed(later))
        return batch

    async def _go(self, batch: list[tuple[I, asyncio.Future[R]]]) -> None:
        held: set[int] = set()  # items written alone (by id): their keys stay taken
        try:
            self.statements += 1
            self.rows += len(batch)
            outcomes = await self._run([item for item, _ in batch])
            for (item, future), outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, Alone):
                    self.alone += 1
                    held.add(id(item))
                    asyncio.ensure_future(self._alone(item, future, outcome))
                elif future.done():
                    continue
                elif isinstance(outcome, Exception):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._running -= 1
            for item, _ in batch:
                if id(item) not in held:
                    self._busy.discard(self._key(item))
            if self._queue:
                self._flush()

    async def _alone(self, item: I, future: asyncio.Future[R], alone: Alone[R]) -> None:
        try:
            result = await alone.write()
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
        else:
            if not future.done():
                future.set_result(result)
        finally:
            self._busy.discard(self._key(item))
            if self._queue:
                self._flush()


@dataclass(frozen=True, slots=True)
class _Change:
    task_id: str
    status: TaskStatus
    result: Any = None
    error: Any = None
    tenant_id: str | None = None


@dataclass(frozen=True, slots=True)
class _Report:
    task_id: str
    percent: float
    message: str | None


Single = Callable[[asyncpg.Connection, I], Awaitable[R]]


class GroupCommit:
    """The API's writes, coalesced per kind; one per process, on the API's pool.

    Each method answers as its single-row function does (``create_task``,
    ``start_task``, ``complete_task``, ``cancel_task``, ``report_progress`` under
    autocommit): the same result, the same errors.
    """

    def __init__(
        self, pool: asyncpg.Pool, *, box: SecretBox | None = None, max_running: int = MAX_RUNNING
    ) -> None:
        self._pool, self._box = pool, box
        self.submits: Batcher[Submission, Created] = Batcher(
            self._submit_batch, key=_submit_key, max_running=max_running
        )
        self.changes: Batcher[_Change, Task] = Batcher(
            self._change_batch, key=lambda c: c.task_id, max_running=max_running
        )
        self.reports: Batcher[_Report, Task] = Batcher(
            self._report_batch, key=lambda r: r.task_id, max_running=max_running
        )

    def counters(self) -> str:
        """One line of what each kind of write did, for the shutdown log."""
        parts = []
        for name, b in (
            ("submits", self.submits),
            ("changes", self.changes),
            ("reports", self.reports),
        ):
            if b.rows:
                parts.append(f"{name} {b.rows} in {b.statements} statements ({b.alone} alone)")
        return "; ".join(parts) or "no writes"

    # -- what the routes call ----------------------------------------------------------

    async def submit(
        self, tenant_id: str, spec: NewTask, idempotency: Idempotency | None = None
    ) -> Created:
        """:func:`create_task`, in the statement of the submits arriving with it."""
        # The request's span, read here in the request's own context (the batch runs
        # in another task).
        if spec.trace is None and (current := tracing.current()) is not None:
            spec = replace(spec, trace=current)
        return await self.submits(Submission(tenant_id, spec, idempotency))

    async def start(self, task_id: str) -> Task:
        """:func:`start_task`: queued → running."""
        with tracing.change("start", task_id):
            return await self.changes(_Change(task_id, "running"))

    async def complete(
        self,
        task_id: str,
        status: TaskStatus,
        result: Any = None,
        error: Any = None,
        *,
        tenant_id: str | None = None,
    ) -> Task:
        """:func:`complete_task`: a live task → terminal ``status``, with its event."""
        if status not in TERMINAL:
            raise ValueError(f"{status!r} is not a terminal status")
        with tracing.change("complete", task_id, status=status):
            return await self.changes(_Change(task_id, status, result, error, tenant_id))

    async def cancel(self, task_id: str, *, tenant_id: str | None = None) -> Task:
        """:func:`cancel_task`: → cancelled, with a ``task.cancelled`` event."""
        return await self.complete(task_id, "cancelled", tenant_id=tenant_id)

    async def progress(self, task_id: str, percent: float, message: str | None = None) -> Task:
        """:func:`report_progress` on a running task."""
        percent, message = check_progress(percent, message)
        with tracing.change("progress", task_id):
            return await self.reports(_Report(task_id, percent, message))

    # -- the batches ---------------------------------------------------------------------

    async def _batch(
        self,
        items: list[I],
        many: Callable[[asyncpg.Connection, list[I]], Awaitable[list[R | Exception | None]]],
        single: Single[I, R],
    ) -> list[R | Exception | Alone[R]]:
        """``many`` on one connection; each None it gives, and every item when the
        statement itself fails (one bad row fails them all, writing nothing), is
        written alone through ``single``. So is every item when the batch's parameter
        cannot be built (text that is not UTF-8): the bad one then fails by itself."""
        try:
            async with self._pool.acquire() as conn:
                done = await many(conn, items)
        except (asyncpg.PostgresError, UnicodeError) as exc:
            if isinstance(exc, TRANSIENT_ERRORS) or len(items) == 1:
                raise
            return [self._alone(single, item) for item in items]
        return [
            self._alone(single, item) if d is None else d
            for item, d in zip(items, done, strict=True)
        ]

    def _alone(self, single: Single[I, R], item: I) -> Alone[R]:
        async def write() -> R:
            async with self._pool.acquire() as conn:
                return await single(conn, item)

        return Alone(write)

    async def _submit_batch(self, items: list[Submission]) -> list[Any]:
        async def many(conn: asyncpg.Connection, subs: list[Submission]) -> list[Any]:
            return await create_tasks(conn, subs, box=self._box)

        async def single(conn: asyncpg.Connection, sub: Submission) -> Created:
            return await create_task(
                conn, sub.tenant_id, sub.spec, idempotency=sub.idempotency, box=self._box
            )

        return await self._batch(items, many, single)

    async def _change_batch(self, items: list[_Change]) -> list[Any]:
        async def many(conn: asyncpg.Connection, changes: list[_Change]) -> list[Any]:
            # None where nothing changed: refused, locked by another transaction, or a
            # task only a transaction can complete; alone, the single-row path says
            # which (and writes the last two).
            return list(await store.finish_tasks(conn, [_transition(c) for c in changes]))

        return await self._batch(items, many, _one)

    async def _report_batch(self, items: list[_Report]) -> list[Any]:
        async def many(conn: asyncpg.Connection, reports: list[_Report]) -> list[Any]:
            rows = [store.Report(r.task_id, r.percent, r.message) for r in reports]
            return list(await store.report_progresses(conn, rows))

        return await self._batch(items, many, _report)


def _submit_key(sub: Submission) -> Hashable | None:
    return None if sub.idempotency is None else (sub.tenant_id, sub.idempotency.key)


def _transition(change: _Change) -> store.Transition:
    terminal = change.status in TERMINAL
    return store.Transition(
        task_id=change.task_id,
        status=change.status,
        allowed_from=LIVE_STATUSES if terminal else ("queued",),
        result=change.result,
        error=change.error,
        event_id=EventId(ids.event_id()) if terminal else None,
        tenant_id=change.tenant_id,
    )


async def _one(conn: asyncpg.Connection, change: _Change) -> Task:
    if change.status == "running":
        return await write_start(conn, change.task_id, autocommit=True)
    return await write_completion(
        conn,
        change.task_id,
        cast(TerminalStatus, change.status),  # checked by GroupCommit.complete
        change.result,
        change.error,
        tenant_id=change.tenant_id,
        autocommit=True,
    )


async def _report(conn: asyncpg.Connection, report: _Report) -> Task:
    return await write_progress(
        conn, report.task_id, report.percent, report.message, autocommit=True
    )
