"""Deduplication in PostgreSQL, on the receiver's own connection and transaction.

Create the table once with :data:`DDL` (the file ``hookrelay/receiver/seen.sql``),
then, inside the transaction that does the work::

    async with conn.transaction():
        if await AsyncpgSeen(conn).add(event.id):
            await conn.execute("INSERT INTO orders ...")

The id's row and the work commit together; rolled back, neither stays, and the
retry does the work. Two deliveries of one event at once: the second ``add`` waits
on the first's row lock, then answers False once it commits. Nothing here imports a
driver: the connection you pass is used as it is (asyncpg, or psycopg 3 sync/async).
"""

from __future__ import annotations

import re
from datetime import datetime
from importlib.resources import files
from typing import Any

TABLE = "hookrelay_seen_webhooks"
DDL = files(__package__).joinpath("seen.sql").read_text()
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?")


def _table(name: str) -> str:
    # The name goes into the SQL text: only a plain (schema.)identifier is accepted.
    if not _IDENT.fullmatch(name):
        raise ValueError(f"not a plain table name: {name!r}")
    return name


def _sql(table: str) -> tuple[str, str, str]:
    return (
        f"INSERT INTO {table} (webhook_id) VALUES ($1) ON CONFLICT DO NOTHING RETURNING true",
        f"DELETE FROM {table} WHERE webhook_id = $1",
        f"DELETE FROM {table} WHERE received_at < $1",
    )


class AsyncpgSeen:
    """The seen ids in ``table``, through an asyncpg connection (run inside your transaction)."""

    def __init__(self, conn: Any, table: str = TABLE) -> None:
        self.conn = conn
        self._add, self._discard, self._purge = _sql(_table(table))

    async def add(self, webhook_id: str) -> bool:
        return bool(await self.conn.fetchval(self._add, webhook_id))

    async def discard(self, webhook_id: str) -> None:
        await self.conn.execute(self._discard, webhook_id)

    async def purge_before(self, when: datetime) -> int:
        """Forget the ids received before ``when``; how many."""
        status = await self.conn.execute(self._purge, when)
        return int(status.rsplit(" ", 1)[-1])


def _psycopg(sql: str) -> str:
    return sql.replace("$1", "%s")


class PsycopgSeen:
    """The seen ids in ``table``, through a psycopg 3 (sync) ``Connection``."""

    def __init__(self, conn: Any, table: str = TABLE) -> None:
        self.conn = conn
        self._add, self._discard, self._purge = map(_psycopg, _sql(_table(table)))

    def add(self, webhook_id: str) -> bool:
        return self.conn.execute(self._add, (webhook_id,)).fetchone() is not None

    def discard(self, webhook_id: str) -> None:
        self.conn.execute(self._discard, (webhook_id,))

    def purge_before(self, when: datetime) -> int:
        return int(self.conn.execute(self._purge, (when,)).rowcount)


class AsyncPsycopgSeen:
    """The seen ids in ``table``, through a psycopg 3 ``AsyncConnection``."""

    def __init__(self, conn: Any, table: str = TABLE) -> None:
        self.conn = conn
        self._add, self._discard, self._purge = map(_psycopg, _sql(_table(table)))

    async def add(self, webhook_id: str) -> bool:
        cursor = await self.conn.execute(self._add, (webhook_id,))
        return await cursor.fetchone() is not None

    async def discard(self, webhook_id: str) -> None:
        await self.conn.execute(self._discard, (webhook_id,))

    async def purge_before(self, when: datetime) -> int:
        return int((await self.conn.execute(self._purge, (when,))).rowcount)
