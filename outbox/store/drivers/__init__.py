"""Running a plan (``store.steps``) on the caller's connection, whatever its driver.

What a driver is, and asyncpg's, are in :mod:`.base`. The adapters for the other
libraries (:mod:`.psycopg`, :mod:`.sqlalchemy`, :mod:`.sqlalchemy_async`) build on
that and import nothing from here: this module picks one of them, never the other
way round. The atomic block is a savepoint if the caller has a
transaction open, else a transaction of its own, as asyncpg's and psycopg's
``transaction()`` do; under SQLAlchemy it is SQLAlchemy's own nested
transaction (``hookrelay.outbox.store.drivers.sqlalchemy``). Given an asyncpg
pool rather than a connection, the call takes one of its connections, in a
transaction of its own.

The driver is picked by the connection's type, once per type. psycopg and
SQLAlchemy are optional extras: their modules are imported only when one of
their connections is seen. asyncpg's connection is used as it is, so the
service's own calls pay for one lookup and one small object.

Of hookrelay, this package and its adapters import only :mod:`hookrelay.outbox.store.steps`
and :mod:`hookrelay.outbox.errors`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from hookrelay.outbox.errors import DatabaseUnavailable
from hookrelay.outbox.store.drivers.base import (
    AsyncDriver,
    AsyncpgDriver,
    AsyncpgPoolDriver,
    SyncDriver,
    family,
)
from hookrelay.outbox.store.steps import Plan, Row, Step

T = TypeVar("T")


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


async def run(conn: object, plan: Plan[T], *, atomic: bool = True) -> T:
    """Run ``plan`` on ``conn`` (asyncpg, psycopg async, SQLAlchemy async), atomically.

    ``atomic`` False: no transaction of its own, so on a connection with none open
    each step commits by itself (autocommit). Only for a plan that writes with one
    statement (``state_changes.autocommit_plan``): a single-statement write then
    costs one round trip, not three (BEGIN, the statement, COMMIT).
    """
    driver = async_driver(conn)
    with _running(driver, plan):
        if not atomic:
            return await _steps(driver, plan)
        async with driver.atomic():
            return await _steps(driver, plan)


async def _steps(driver: AsyncDriver, plan: Plan[T]) -> T:
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


_ASYNC: dict[type, Callable[[Any], AsyncDriver]] = {}
_SYNC: dict[type, Callable[[Any], SyncDriver]] = {}
_TAKES = (
    "an asyncpg connection or pool, a psycopg AsyncConnection, or a SQLAlchemy AsyncConnection or "
    "AsyncSession (hookrelay.outbox.sync takes a psycopg Connection, or a SQLAlchemy "
    "Connection or Session)"
)

__all__ = ["AsyncDriver", "SyncDriver", "async_driver", "run", "run_sync", "sync_driver"]


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
    elif kind == "sqlalchemy" and sync:
        from hookrelay.outbox.store.drivers import sqlalchemy as via_sqlalchemy

        make = via_sqlalchemy.driver_for(cls)
    elif kind == "sqlalchemy":
        # Its own module: sqlalchemy.ext.asyncio needs greenlet, which sync callers lack.
        from hookrelay.outbox.store.drivers import sqlalchemy_async as via_sqlalchemy_async

        make = via_sqlalchemy_async.driver_for(cls)
    else:
        make = None
    if make is None:
        what = "hookrelay.outbox.sync" if sync else "hookrelay.outbox"
        raise TypeError(f"{what}: cannot run on a {cls.__module__}.{cls.__qualname__}; {_TAKES}")
    return make
