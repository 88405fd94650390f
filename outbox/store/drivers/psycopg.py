"""psycopg 3 connections as plan drivers (``hookrelay.outbox.store.drivers``), sync and async.

Raw cursors take PostgreSQL's own ``$n`` placeholders, so ``queries.sql`` runs
unchanged (JSON goes both ways as text, cast in the SQL). What differs from
asyncpg is evened out here: rows come back as dicts with timestamps in UTC
(psycopg gives the session's time zone; bodies and etags are written in UTC),
and a lost connection is told apart (for
:class:`~hookrelay.outbox.errors.DatabaseUnavailable`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from hookrelay.outbox.store.steps import Row, Step

_LOST = (psycopg.OperationalError, psycopg.InterfaceError)


def utc_row(row: dict[str, Any] | None) -> Row | None:
    if row is None:
        return None
    return {
        k: v.astimezone(UTC) if isinstance(v, datetime) and v.tzinfo is not None else v
        for k, v in row.items()
    }


class AsyncPsycopg:
    __slots__ = ("conn",)

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    def atomic(self) -> AbstractAsyncContextManager[Any]:
        return self.conn.transaction()

    async def fetch(self, step: Step) -> Row | None:
        async with psycopg.AsyncRawCursor(self.conn, row_factory=dict_row) as cur:
            await cur.execute(step.sql, step.args)
            return utc_row(await cur.fetchone()) if step.decode else None

    def lost(self, exc: Exception) -> bool:
        return isinstance(exc, _LOST) and self.conn.closed


class SyncPsycopg:
    __slots__ = ("conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def atomic(self) -> AbstractContextManager[Any]:
        return self.conn.transaction()

    def fetch(self, step: Step) -> Row | None:
        with psycopg.RawCursor(self.conn, row_factory=dict_row) as cur:
            cur.execute(step.sql, step.args)
            return utc_row(cur.fetchone()) if step.decode else None

    def lost(self, exc: Exception) -> bool:
        return isinstance(exc, _LOST) and self.conn.closed


def driver_for(cls: type, *, sync: bool) -> Callable[[Any], Any] | None:
    """The driver class for connections of type ``cls``, or None if it is not one."""
    if sync:
        return SyncPsycopg if issubclass(cls, psycopg.Connection) else None
    return AsyncPsycopg if issubclass(cls, psycopg.AsyncConnection) else None


def wrap(conn: object, *, sync: bool) -> Any:
    """A driver for a psycopg connection found under SQLAlchemy, or None."""
    make = driver_for(type(conn), sync=sync)
    return make(conn) if make is not None else None
