"""What every driver is, and asyncpg's: the adapters import this, never the package.

A driver does two things: open an atomic block on the caller's connection, and
run one step, giving back the row as asyncpg would (a mapping; jsonb decoded,
timestamps in UTC). :func:`family` tells which library a connection comes from.
The package (``hookrelay.outbox.store.drivers``) picks a driver by that; the
adapters for psycopg and SQLAlchemy build on what is here.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
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


def family(cls: type) -> str:
    """Which driver library ``cls`` (or a base of it) comes from, or ''."""
    for base in cls.__mro__:
        top = base.__module__.partition(".")[0]
        if top in ("asyncpg", "psycopg", "sqlalchemy"):
            return top
    return ""
