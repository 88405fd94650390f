"""Running a plan (``store.steps``) on the caller's connection, whatever its driver.

A driver does two things: open an atomic block on the caller's connection, and
run one step, giving back the row as asyncpg would (a mapping, timestamps in
UTC; the steps read JSON as text and decode it themselves, so no connection
needs a JSON codec). The atomic block is a savepoint if the caller has a
transaction open, else a transaction of its own, as asyncpg's and psycopg's
``transaction()`` do; under SQLAlchemy it is SQLAlchemy's own nested
transaction (``hookrelay.outbox.store.drivers.sqlalchemy``). Given an asyncpg
pool rather than a connection, the call takes one of its connections, in a
transaction of its own.

The driver is picked by the connection's type, once per type. psycopg and
SQLAlchemy are optional extras: their modules are imported only when one of
their connections is seen. asyncpg's connection is used as it is, so the
service's own calls pay for one lookup and one small object.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol, TypeVar, cast

from hookrelay.outbox.errors import DatabaseUnavailable
from hookrelay.outbox.store.steps import Plan, Row, Step

T = TypeVar("T")


class AsyncDriver(Protocol):
    def atomic(self) -> AbstractAsyncContextManager[Any]: ...

    def fetch(self, step: Step) -> Awaitable[Row | None]:
        """The step's row (None if it returns none); anything, if ``decode`` is None."""
        ...

    def lost(self, exc: Exception) -> bool:
        """Whether ``exc`` means the connection is gone (:class:`DatabaseUnavailable`)."""
        ...


class SyncDriver(Protocol):
    def atomic(self) -> AbstractContextManager[Any]: ...

    def fetch(self, step: Step) -> Row | None: ...

    def lost(self, exc: Exception) -> bool: ...


@contextlib.contextmanager
def _running(driver: AsyncDriver | SyncDriver, plan: Plan[Any]) -> Iterator[None]:
    """Close ``plan`` however it ends; a lost connection becomes :class:`DatabaseUnavailable`."""
    try:
        yield
    except Exception as exc:
        if driver.lost(exc):
            raise DatabaseUnavailable(f"connection lost: {exc}") from exc
        raise
    finally:
        plan.close()


def _answer(step: Step, row: Row | None) -> Any:
    """What the plan is sent back for ``step``: its decoded row, or None."""
    return step.decode(row) if row is not None and step.decode else None


async def run(conn: object, plan: Plan[T]) -> T:
    """Run ``plan`` on ``conn`` (asyncpg, psycopg async, SQLAlchemy async), atomically."""
    driver = async_driver(conn)
    with _running(driver, plan):
        async with driver.atomic():
            sent: Any = None
            while True:
                try:
                    step = plan.send(sent)
                except StopIteration as done:
                    return cast(T, done.value)
                sent = _answer(step, await driver.fetch(step))


def run_sync(conn: object, plan: Plan[T]) -> T:
    """Run ``plan`` on ``conn`` (psycopg, SQLAlchemy ``Connection``/``Session``), atomically."""
    driver = sync_driver(conn)
    with _running(driver, plan), driver.atomic():
        sent: Any = None
        while True:
            try:
                step = plan.send(sent)
            except StopIteration as done:
                return cast(T, done.value)
            sent = _answer(step, driver.fetch(step))


class AsyncpgDriver:
    """An asyncpg connection (or pool proxy), with or without JSON codecs: the steps
    send and read JSON as text. ``borrowed``: it is SQLAlchemy's, whose loss is
    reported as :class:`DatabaseUnavailable` (asyncpg's own connections keep
    asyncpg's errors, which the service's handlers know)."""

    __slots__ = ("borrowed", "conn")

    def __init__(self, conn: Any, borrowed: bool = False) -> None:
        self.conn = conn
        self.borrowed = borrowed

    def atomic(self) -> AbstractAsyncContextManager[Any]:
        return cast(AbstractAsyncContextManager[Any], self.conn.transaction())

    def fetch(self, step: Step) -> Awaitable[Any]:
        # asyncpg's own awaitable, not a coroutine around it: this is the API's path.
        # What execute() gives back (a status string) is never decoded.
        if step.decode is None:
            return cast(Awaitable[Any], self.conn.execute(step.sql, *step.args))
        return cast(Awaitable[Any], self.conn.fetchrow(step.sql, *step.args))

    def lost(self, exc: Exception) -> bool:
        return self.borrowed and bool(self.conn.is_closed())


class AsyncpgPoolDriver:
    """An asyncpg pool: one of its connections, for the call, in a transaction of its own."""

    __slots__ = ("inner", "pool")

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.inner: AsyncpgDriver | None = None

    @contextlib.asynccontextmanager
    async def atomic(self) -> AsyncIterator[None]:
        async with self.pool.acquire() as conn, conn.transaction():
            self.inner = AsyncpgDriver(conn)
            yield

    def fetch(self, step: Step) -> Awaitable[Any]:
        assert self.inner is not None, "fetch runs inside atomic()"
        return self.inner.fetch(step)

    def lost(self, exc: Exception) -> bool:
        return False


_ASYNC: dict[type, Callable[[Any], AsyncDriver]] = {}
_SYNC: dict[type, Callable[[Any], SyncDriver]] = {}
_TAKES = (
    "an asyncpg connection or pool, a psycopg AsyncConnection, or a SQLAlchemy AsyncConnection or "
    "AsyncSession (hookrelay.outbox.sync takes a psycopg Connection, or a SQLAlchemy "
    "Connection or Session)"
)


def family(cls: type) -> str:
    """Which driver library ``cls`` (or a base of it) comes from, or ''."""
    for base in cls.__mro__:
        top = base.__module__.partition(".")[0]
        if top in ("asyncpg", "psycopg", "sqlalchemy"):
            return top
    return ""


def async_driver(conn: object) -> AsyncDriver:
    """The driver for an async connection or session; TypeError for anything else."""
    make = _ASYNC.get(type(conn))
    if make is None:
        make = _ASYNC[type(conn)] = _pick(type(conn), sync=False)
    return make(conn)


def sync_driver(conn: object) -> SyncDriver:
    """The driver for a sync connection or session; TypeError for anything else."""
    make = _SYNC.get(type(conn))
    if make is None:
        make = _SYNC[type(conn)] = _pick(type(conn), sync=True)
    return make(conn)


def _pick(cls: type, *, sync: bool) -> Callable[[Any], Any]:
    kind = family(cls)
    if kind == "asyncpg" and not sync:
        from asyncpg import Pool

        return AsyncpgPoolDriver if issubclass(cls, Pool) else AsyncpgDriver
    if kind == "psycopg":
        from hookrelay.outbox.store.drivers import psycopg as via_psycopg

        make = via_psycopg.driver_for(cls, sync=sync)
    elif kind == "sqlalchemy":
        from hookrelay.outbox.store.drivers import sqlalchemy as via_sqlalchemy

        make = via_sqlalchemy.driver_for(cls, sync=sync)
    else:
        make = None
    if make is None:
        what = "hookrelay.outbox.sync" if sync else "hookrelay.outbox"
        raise TypeError(f"{what}: cannot run on a {cls.__module__}.{cls.__qualname__}; {_TAKES}")
    return make
