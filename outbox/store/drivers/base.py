"""What every driver is, and asyncpg's: the adapters import this, never the package.

A driver does two things: open an atomic block on the caller's connection, and
run one step, giving back the row as asyncpg would (a mapping, timestamps in
UTC; the steps send and read JSON as text and decode it themselves, so no
connection needs a JSON codec). :func:`family` tells which library a connection comes from.
The package (``hookrelay.outbox.store.drivers``) picks a driver by that; the
adapters for psycopg and SQLAlchemy build on what is here.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol, cast

from hookrelay.outbox.store.steps import Row, Step


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


def family(cls: type) -> str:
    """Which driver library ``cls`` (or a base of it) comes from, or ''."""
    for base in cls.__mro__:
        top = base.__module__.partition(".")[0]
        if top in ("asyncpg", "psycopg", "sqlalchemy"):
            return top
    return ""
