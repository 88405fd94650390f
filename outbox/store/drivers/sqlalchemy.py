"""SQLAlchemy 2 connections and sessions as plan drivers (``hookrelay.outbox.store.drivers``).

The statements run on the driver connection underneath (asyncpg or psycopg 3,
through their own drivers), inside a SAVEPOINT that SQLAlchemy opens and
closes itself (``begin_nested``). So SQLAlchemy's bookkeeping stays right: its
transaction is physically begun before the first statement (its drivers begin
lazily, and a BEGIN of ours would be committed or lost behind its back), the
caller's pending ORM changes are flushed first, and the caller commits or rolls
back everything as usual. With no transaction begun, SQLAlchemy's autobegin
opens one, which the caller then commits.

The async classes are in :mod:`.sqlalchemy_async`, which builds on this module and
is imported only for an async connection or session: ``sqlalchemy.ext.asyncio``
needs greenlet (the ``sqlalchemy[asyncio]`` extra), which sync callers need not install.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from hookrelay.outbox.store.drivers.base import AsyncDriver, AsyncpgDriver, SyncDriver, family
from hookrelay.outbox.store.steps import Row, Step

_DIALECTS = "use a postgresql+asyncpg:// or postgresql+psycopg:// engine"


def inner_driver(raw: Any, *, sync: bool) -> Any:
    kind = family(type(raw))
    if kind == "asyncpg" and not sync:
        return AsyncpgDriver(raw, borrowed=True)
    if kind == "psycopg":
        from hookrelay.outbox.store.drivers import psycopg as via_psycopg

        found = via_psycopg.wrap(raw, sync=sync)
        if found is not None:
            return found
    raise TypeError(f"outbox cannot run on a {type(raw).__module__} connection: {_DIALECTS}")


def lost(exc: Exception, inner: AsyncDriver | SyncDriver | None) -> bool:
    """SQLAlchemy's own statements (the SAVEPOINT) report a lost connection as an
    invalidated one; ours, run on the driver connection, as that driver does."""
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated
    return inner is not None and inner.lost(exc)


class SyncAlchemy:
    __slots__ = ("inner", "target")

    def __init__(self, target: Connection | Session) -> None:
        self.target = target
        self.inner: SyncDriver | None = None

    @contextmanager
    def atomic(self) -> Iterator[None]:
        with self.target.begin_nested():
            conn = self.target
            if isinstance(conn, Session):
                conn = conn.connection()
            self.inner = inner_driver(conn.connection.driver_connection, sync=True)
            yield

    def fetch(self, step: Step) -> Row | None:
        assert self.inner is not None, "fetch runs inside atomic()"
        return self.inner.fetch(step)

    def lost(self, exc: Exception) -> bool:
        return lost(exc, self.inner)


def driver_for(cls: type) -> Callable[[Any], Any] | None:
    """The driver class for sync SQLAlchemy objects of type ``cls``, or None if not one."""
    return SyncAlchemy if issubclass(cls, Connection | Session) else None
