"""SQLAlchemy 2 ``AsyncConnection`` and ``AsyncSession`` as plan drivers.

Apart from :mod:`.sqlalchemy` (whose helpers it uses) because ``sqlalchemy.ext.asyncio``
needs greenlet (the ``sqlalchemy[asyncio]`` extra): a sync ``Connection`` or ``Session``
must work without it, so this module is imported only when an async one is seen.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from hookrelay.outbox.store.drivers.base import AsyncDriver
from hookrelay.outbox.store.drivers.sqlalchemy import inner_driver, lost
from hookrelay.outbox.store.steps import Row, Step

__all__ = ["AsyncAlchemy", "driver_for"]


class AsyncAlchemy:
    __slots__ = ("inner", "target")

    def __init__(self, target: AsyncConnection | AsyncSession) -> None:
        self.target = target
        self.inner: AsyncDriver | None = None

    @asynccontextmanager
    async def atomic(self) -> AsyncIterator[None]:
        async with self.target.begin_nested():
            conn = self.target
            if isinstance(conn, AsyncSession):
                conn = await conn.connection()
            raw = (await conn.get_raw_connection()).driver_connection
            self.inner = inner_driver(raw, sync=False)
            yield

    async def fetch(self, step: Step) -> Row | None:
        assert self.inner is not None, "fetch runs inside atomic()"
        return await self.inner.fetch(step)

    def lost(self, exc: Exception) -> bool:
        return lost(exc, self.inner)


def driver_for(cls: type) -> Callable[[Any], Any] | None:
    """The driver class for async SQLAlchemy objects of type ``cls``, or None if not one."""
    return AsyncAlchemy if issubclass(cls, AsyncConnection | AsyncSession) else None
