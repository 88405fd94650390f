"""An executor's connection of each kind the outbox takes, behind one async face.

Each kind opens its connection in a session time zone other than UTC, as an
application's may be, so the tests see that rows and bodies come out in UTC
whatever the driver. Sync kinds run every call on a thread of their own (a sync
connection stays on one thread), so a test can have one block while another
commits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncpg
import psycopg
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

import hookrelay.outbox.sync
from hookrelay import outbox
from hookrelay.outbox.models import Task
from hookrelay.outbox.store.pool import create_pool

ZONE = "Asia/Kolkata"  # +05:30: a timestamp left in it would show in every body


class Executor:
    """A connection, its transaction, the caller's own write and the outbox calls."""

    sync = False

    async def open(self, dsn: str) -> None:
        raise NotImplementedError

    async def begin(self) -> None:
        raise NotImplementedError

    async def write(self, value: str) -> None:
        """The caller's own insert, into ``notes`` (the test creates it)."""
        raise NotImplementedError

    async def commit(self) -> None:
        raise NotImplementedError

    async def rollback(self) -> None:
        raise NotImplementedError

    async def pid(self) -> int:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    def handle(self) -> Any:
        """What the executor passes to outbox functions."""
        raise NotImplementedError

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Task:
        """``outbox.<name>`` (or ``hookrelay.outbox.sync.<name>``) on this connection."""
        if self.sync:
            fn = getattr(hookrelay.outbox.sync, name)
            return await self.run(lambda: fn(self.handle(), *args, **kwargs))  # type: ignore[no-any-return]
        return await getattr(outbox, name)(self.handle(), *args, **kwargs)  # type: ignore[no-any-return]

    async def run(self, fn: Callable[[], Any]) -> Any:
        raise NotImplementedError


class Asyncpg(Executor):
    """A plain ``asyncpg.connect()``: no codecs, no set-up call of ours."""

    async def open(self, dsn: str) -> None:
        self.conn = await asyncpg.connect(dsn, server_settings={"timezone": ZONE})

    async def begin(self) -> None:
        self.tx = self.conn.transaction()
        await self.tx.start()

    async def write(self, value: str) -> None:
        await self.conn.execute("INSERT INTO notes VALUES ($1)", value)

    async def commit(self) -> None:
        await self.tx.commit()

    async def rollback(self) -> None:
        await self.tx.rollback()

    async def pid(self) -> int:
        return int(await self.conn.fetchval("SELECT pg_backend_pid()"))

    async def close(self) -> None:
        await self.conn.close()

    def handle(self) -> Any:
        return self.conn


class AsyncpgPool(Asyncpg):
    """A connection of the executor's own ``asyncpg.create_pool()``, made with no ``init``
    (``ours``: of hookrelay's pool, whose connections decode JSON themselves)."""

    def __init__(self, ours: bool = False) -> None:
        self.ours = ours

    async def open(self, dsn: str) -> None:
        if self.ours:
            self.pool = await create_pool(dsn, max_size=1)  # in UTC, as the service talks
        else:
            self.pool = await asyncpg.create_pool(
                dsn, min_size=1, max_size=1, server_settings={"timezone": ZONE}
            )
        self.conn = await self.pool.acquire()

    async def close(self) -> None:
        await self.pool.release(self.conn)
        await self.pool.close()


class PsycopgAsync(Executor):
    async def open(self, dsn: str) -> None:
        self.conn = await psycopg.AsyncConnection.connect(dsn, options=f"-c TimeZone={ZONE}")

    async def begin(self) -> None:
        await self.conn.execute("SELECT 1")  # psycopg begins at the first statement

    async def write(self, value: str) -> None:
        await self.conn.execute("INSERT INTO notes VALUES (%s)", (value,))

    async def commit(self) -> None:
        await self.conn.commit()

    async def rollback(self) -> None:
        await self.conn.rollback()

    async def pid(self) -> int:
        return int(self.conn.info.backend_pid)

    async def close(self) -> None:
        await self.conn.close()

    def handle(self) -> Any:
        return self.conn


class Threaded(Executor):
    """A sync connection: every call on its own single thread."""

    sync = True

    def __init__(self) -> None:
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="executor")

    async def run(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.thread, fn)

    async def close(self) -> None:
        await self.run(self.shut)
        self.thread.shutdown()

    def shut(self) -> None:
        raise NotImplementedError


class PsycopgSync(Threaded):
    async def open(self, dsn: str) -> None:
        self.conn = await self.run(
            lambda: psycopg.Connection.connect(dsn, options=f"-c TimeZone={ZONE}")
        )

    async def begin(self) -> None:
        await self.run(lambda: self.conn.execute("SELECT 1"))

    async def write(self, value: str) -> None:
        await self.run(lambda: self.conn.execute("INSERT INTO notes VALUES (%s)", (value,)))

    async def commit(self) -> None:
        await self.run(self.conn.commit)

    async def rollback(self) -> None:
        await self.run(self.conn.rollback)

    async def pid(self) -> int:
        return int(self.conn.info.backend_pid)

    def shut(self) -> None:
        self.conn.close()

    def handle(self) -> Any:
        return self.conn


def sa_url(dsn: str, driver: str) -> str:
    return dsn.replace("postgresql://", f"postgresql+{driver}://", 1)


def zone_args(driver: str) -> dict[str, Any]:
    if driver == "asyncpg":
        return {"server_settings": {"timezone": ZONE}}
    return {"options": f"-c TimeZone={ZONE}"}


INSERT = text("INSERT INTO notes VALUES (:v)")
PID = text("SELECT pg_backend_pid()")


class AlchemyAsync(Executor):
    """A SQLAlchemy ``AsyncConnection``, or an ``AsyncSession`` when ``session``."""

    def __init__(self, driver: str, session: bool) -> None:
        self.driver, self.session = driver, session

    async def open(self, dsn: str) -> None:
        self.engine = create_async_engine(
            sa_url(dsn, self.driver), poolclass=NullPool, connect_args=zone_args(self.driver)
        )
        if self.session:
            self.target: Any = AsyncSession(self.engine)
        else:
            self.target = await self.engine.connect()

    async def begin(self) -> None:
        self.tx = await self.target.begin()

    async def write(self, value: str) -> None:
        await self.target.execute(INSERT, {"v": value})

    async def commit(self) -> None:
        await self.tx.commit()

    async def rollback(self) -> None:
        await self.tx.rollback()

    async def pid(self) -> int:
        return int((await self.target.execute(PID)).scalar_one())

    async def close(self) -> None:
        with contextlib.suppress(Exception):  # after a lost connection
            await self.target.close()
        await self.engine.dispose()

    def handle(self) -> Any:
        return self.target


class AlchemySync(Threaded):
    """A SQLAlchemy ``Connection``, or a ``Session`` when ``session`` (psycopg 3)."""

    def __init__(self, session: bool) -> None:
        super().__init__()
        self.session = session

    async def open(self, dsn: str) -> None:
        def connect() -> None:
            self.engine = create_engine(
                sa_url(dsn, "psycopg"), poolclass=NullPool, connect_args=zone_args("psycopg")
            )
            self.target: Any = Session(self.engine) if self.session else self.engine.connect()

        await self.run(connect)

    async def begin(self) -> None:
        self.tx = await self.run(self.target.begin)

    async def write(self, value: str) -> None:
        await self.run(lambda: self.target.execute(INSERT, {"v": value}))

    async def commit(self) -> None:
        await self.run(self.tx.commit)

    async def rollback(self) -> None:
        await self.run(self.tx.rollback)

    async def pid(self) -> int:
        return int(await self.run(lambda: self.target.execute(PID).scalar_one()))

    def shut(self) -> None:
        with contextlib.suppress(Exception):  # after a lost connection
            self.target.close()
        self.engine.dispose()

    def handle(self) -> Any:
        return self.target


KINDS: dict[str, Callable[[], Executor]] = {
    "asyncpg": Asyncpg,
    "asyncpg-pool": AsyncpgPool,
    "asyncpg-ours": lambda: AsyncpgPool(ours=True),
    "psycopg": PsycopgAsync,
    "psycopg-sync": PsycopgSync,
    "sa-asyncpg-conn": lambda: AlchemyAsync("asyncpg", session=False),
    "sa-asyncpg-session": lambda: AlchemyAsync("asyncpg", session=True),
    "sa-psycopg-conn": lambda: AlchemyAsync("psycopg", session=False),
    "sa-psycopg-session": lambda: AlchemyAsync("psycopg", session=True),
    "sa-sync-conn": lambda: AlchemySync(session=False),
    "sa-sync-session": lambda: AlchemySync(session=True),
}
# Kinds whose connection is not an asyncpg one: a lost connection is reported as
# DatabaseUnavailable (on asyncpg's own, the service's handlers know asyncpg's errors).
BORROWED = [k for k in KINDS if not k.startswith("asyncpg")]


@contextlib.asynccontextmanager
async def executors(kind: str, dsn: str) -> AsyncIterator[Callable[[], Any]]:
    """A factory of opened executors of ``kind``; all closed at the end."""
    opened: list[Executor] = []

    async def make() -> Executor:
        ex = KINDS[kind]()
        await ex.open(dsn)
        opened.append(ex)
        return ex

    try:
        yield make
    finally:
        for ex in opened:
            await ex.close()
