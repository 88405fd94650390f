"""Telling whether a connection reaches PostgreSQL through a connection pooler.

A transaction pooler (PgBouncer's ``pool_mode = transaction``, pgcat, Odyssey,
Supavisor...) hands each transaction to whichever server connection is free, so
nothing that lives in a session survives from one statement to the next: named
prepared statements (asyncpg's statement cache), session ``SET``, ``LISTEN``.

The test: at start-up PostgreSQL tells the client the process id of its backend
(the BackendKeyData message, which cancel requests quote back). PgBouncer answers
the client's start-up itself, with an id and cancel key of its own making, since a
cancel must reach the pooler, which alone knows which server connection the
client holds at that moment; other poolers that share server connections have the
same reason to. So a connection whose announced id differs from
``pg_backend_pid()`` went through a pooler; a direct one always matches. It tells
a pooler is there, not its pool mode: a session pooler is detected too (it keeps
sessions, so turning the statement cache off there costs speed, not correctness;
``HOOKRELAY_PREPARED_STATEMENTS=on`` keeps it).
"""

from __future__ import annotations

import asyncpg

from hookrelay.outbox.sql import sql

_BACKEND_PID = sql("backend_pid")


async def through_pooler(conn: asyncpg.Connection) -> bool:
    """Whether ``conn`` reaches PostgreSQL through a pooler (see the module's docstring).

    ``conn`` should be made with ``statement_cache_size=0``: a cached connection
    prepares a named statement, which a transaction pooler may lose before it runs.
    """
    announced = conn.get_server_pid()
    actual: int = await conn.fetchval(_BACKEND_PID)
    return bool(announced != actual)
