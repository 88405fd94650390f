"""Running a plan (``hookrelay.outbox.store.steps``) on the caller's connection, whatever its driver.

A driver does two things: open an atomic block on the caller's connection, and
run one step, giving back the row as asyncpg would (a mapping; jsonb decoded,
timestamps in UTC). The atomic block is a savepoint if the caller has a
transaction open, else a transaction of its own, as asyncpg's and psycopg's
``transaction()`` do; under SQLAlchemy it is SQLAlchemy's own nested
transaction (``hookrelay.outbox.store.drivers.sqlalchemy``).

The driver is picked by the connection's type, once per type. psycopg and
SQLAlchemy are optional extras: their modules are imported only when one of
their connections is seen. asyncpg's connection is used as it is, so the
service's own calls pay for one lookup and one small object.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
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
    """An asyncpg connection (or pool proxy). ``borrowed``: it is SQLAlchemy's, whose
    jsonb codec takes JSON text, and whose loss is reported as :class:`DatabaseUnavailable`
    (the service's own connections keep asyncpg's errors, which its handlers know)."""

    __slots__ = ("borrowed", "conn")

    def __init__(self, conn: Any, borrowed: bool = False) -> None:
        self.conn = conn
        self.borrowed = borrowed

    def atomic(self) -> AbstractAsyncContextManager[Any]:
        return cast(AbstractAsyncContextManager[Any], self.conn.transaction())

    def fetch(self, step: Step) -> Awaitable[Any]:
        # asyncpg's own awaitable, not a coroutine around it: this is the API's path.
        # What execute() gives back (a status string) is never decoded.
        args = json_text(step) if self.borrowed else step.args
        if step.decode is None:
            return cast(Awaitable[Any], self.conn.execute(step.sql, *args))
        return cast(Awaitable[Any], self.conn.fetchrow(step.sql, *args))

    def lost(self, exc: Exception) -> bool:
        return self.borrowed and bool(self.conn.is_closed())


def json_text(step: Step) -> tuple[Any, ...]:
    """``step``'s arguments with its jsonb ones as JSON text (NULL stays NULL)."""
    if not step.jsonb:
        return step.args
    args = list(step.args)
    for i in step.jsonb:
        if args[i] is not None:
            args[i] = json.dumps(args[i])
    return tuple(args)


_ASYNC: dict[type, Callable[[Any], AsyncDriver]] = {}
_SYNC: dict[type, Callable[[Any], SyncDriver]] = {}
_TAKES = (
    "an asyncpg connection, a psycopg AsyncConnection, or a SQLAlchemy AsyncConnection or "
    "AsyncSession (hookrelay.outbox.sync takes a psycopg Connection, or a SQLAlchemy Connection or Session)"
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
        return AsyncpgDriver
    if kind == "psycopg":
        from hookrelay.outbox.store.drivers import psycopg as via_psycopg

        make = via_psycopg.driver_for(cls, sync=sync)
    elif kind == "sqlalchemy":
        from hookrelay.outbox.store.drivers import sqlalchemy as via_sqlalchemy

        make = via_sqlalchemy.driver_for(cls, sync=sync)
    else:
        make = None
    if make is None:
        what = "hookrelay.outbox.sync" if sync else "outbox"
        raise TypeError(f"{what}: cannot run on a {cls.__module__}.{cls.__qualname__}; {_TAKES}")
    return make
