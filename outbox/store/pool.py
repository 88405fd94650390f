"""Connections: a pool that waits for the database, JSON codecs, the schema loader.

Behind a transaction pooler (PgBouncer's ``pool_mode = transaction``) a pool runs
without asyncpg's statement cache (``prepared_statements=False``, or ``None`` to
find out with :func:`dsn_through_pooler`): asyncpg then prepares every statement
unnamed, in the same round of messages that runs it, so no statement is looked up
on a server connection the pooler has since given to someone else.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential_jitter,
)

from hookrelay.outbox.errors import DatabaseUnavailable
from hookrelay.outbox.store.migrations import migrate
from hookrelay.outbox.store.poolers import through_pooler

log = logging.getLogger("hookrelay.db")
T = TypeVar("T")

# What "the database is not there (yet)" looks like from asyncpg's side.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.CannotConnectNowError,
    asyncpg.PostgresConnectionError,
    # admin shutdown, crash shutdown, cannot connect now: the server restarting
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.TooManyConnectionsError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.InterfaceError,
    # A query issued in the instant between the server's FATAL "terminating
    # connection" and the socket's EOF: that connection is dying, not broken code.
    asyncpg.InternalClientError,
    TimeoutError,
    # A standby, reached by a DATABASE_URL without target_session_attrs=read-write or
    # while a failover is under way: once promoted, the same connection takes writes.
    asyncpg.ReadOnlySQLTransactionError,
)
# What may simply be run again: the above, and a transaction the server rolled back
# (deadlock victim, serialization failure), which wrote nothing.
RETRYABLE_ERRORS: tuple[type[BaseException], ...] = (
    *TRANSIENT_ERRORS,
    asyncpg.exceptions.TransactionRollbackError,
)


def schema_sql() -> str:
    """The schema, read from the installed package (``schema.sql``)."""
    return (
        resources.files("hookrelay.outbox.sql").joinpath("schema.sql").read_text(encoding="utf-8")
    )


# A server whose machine is gone answers nothing, not even a TCP reset: without these a
# query on a connection to it waits for the kernel to give up (about 15 minutes), and a
# dispatcher waiting so never reaches the promoted standby (tests/cluster). Idle
# connections are probed after 5 s, every 2 s, dropped after 3 unanswered probes; data
# sent and not acknowledged for 10 s drops the connection too. asyncpg has no options
# for these (libpq's keepalives_* and tcp_user_timeout), so they are set on its socket.
TCP_OPTIONS: tuple[tuple[int, int, int], ...] = (
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
    (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 5),
    (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 2),
    (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3),
    (socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 10_000),
)


def notice_dead_peers(conn: asyncpg.Connection) -> None:
    """Set :data:`TCP_OPTIONS` on a TCP connection (a Unix socket needs none)."""
    transport = getattr(conn, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    for level, option, value in TCP_OPTIONS:
        sock.setsockopt(level, option, value)


async def init_connection(conn: asyncpg.Connection) -> None:
    """Decode json/jsonb to Python values, always talk UTC, notice a vanished server."""
    notice_dead_peers(conn)
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def apply_schema(conn: asyncpg.Connection) -> None:
    """Bring the schema up to date by running the pending migrations.

    Harmless to run twice or from several processes at once.
    """
    await migrate(conn)


SERVER_SETTINGS = {"timezone": "UTC", "application_name": "hookrelay"}


async def _with_retries(factory: Callable[[], Awaitable[T]], wait_s: float) -> T:
    """Call ``factory`` until it connects, for up to ``wait_s`` seconds."""
    try:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(TRANSIENT_ERRORS),
            wait=wait_exponential_jitter(multiplier=0.1, max=2.0),
            stop=stop_after_delay(wait_s),
        ):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    log.info(
                        "waiting for the database (attempt %d)", attempt.retry_state.attempt_number
                    )
                return await factory()
    except RetryError as exc:
        last = exc.last_attempt.exception()
        raise DatabaseUnavailable(f"database not reachable after {wait_s:g}s: {last}") from last
    raise AssertionError("unreachable")  # pragma: no cover


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool release hook that sends nothing to the server.

    asyncpg's default release runs ``pg_advisory_unlock_all(); CLOSE ALL;
    UNLISTEN *; RESET ALL`` (a round trip, 14% of a busy API's time). Pooled
    connections here never hold session state: advisory locks are
    transaction-scoped, LISTEN uses dedicated connections and nothing calls
    SET. asyncpg still rolls back any open transaction before this runs. The
    same holds the pool to what a transaction pooler allows, which keeps no session.
    """


# Each server of a DATABASE_URL that lists several gets this long to answer. asyncpg
# gives the whole list one deadline (60 s by default): a first server that drops
# packets (its machine gone) used it all, so the second, promoted, was never tried.
SERVER_CONNECT_S = 5.0


class Servers:
    """Connects to the servers a DSN lists, one at a time, each with its own deadline.

    The order learns: the server that answered last goes first, one that did not answer
    at all goes last (a standby that answered but is refused keeps its place). So once
    the standby is promoted the next connection reaches it at once, and only
    connections already waiting on the dead server wait out its deadline.
    ``target_session_attrs`` (read-write, say) goes with each single-server DSN, so
    asyncpg still refuses a standby.
    """

    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        userinfo, at, hosts = parts.netloc.rpartition("@")
        self.dsns = [
            urlunsplit(parts._replace(netloc=f"{userinfo}{at}{host}")) for host in hosts.split(",")
        ]
        self.order = list(range(len(self.dsns)))

    @property
    def several(self) -> bool:
        return len(self.dsns) > 1

    async def connect(self, _dsn: object = None, **kwargs: Any) -> asyncpg.Connection:
        """``asyncpg.connect`` over the list (the pool passes the DSN again: ignored)."""
        last: BaseException | None = None
        for i in list(self.order):
            try:
                conn: asyncpg.Connection = await asyncpg.connect(
                    self.dsns[i], timeout=SERVER_CONNECT_S, **kwargs
                )
            except (OSError, TimeoutError) as exc:  # nobody there: try it last from now on
                self._move(i, to_front=False)
                last = exc
            except TRANSIENT_ERRORS as exc:  # there, but not what was asked (a standby)
                last = exc
            else:
                self._move(i, to_front=True)
                return conn
        assert last is not None
        raise last

    def _move(self, i: int, *, to_front: bool) -> None:
        self.order.remove(i)
        if to_front:
            self.order.insert(0, i)
        else:
            self.order.append(i)


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    wait_s: float = 30.0,
    prepared_statements: bool | None = True,
    **kwargs: Any,
) -> asyncpg.Pool:
    """A pool, retrying the first connection for up to ``wait_s`` seconds.

    ``prepared_statements``: asyncpg's statement cache (named prepared statements),
    off for a transaction pooler; None asks the server first (:func:`dsn_through_pooler`).
    Raises :class:`DatabaseUnavailable` with the last error if it never answers.
    """

    if prepared_statements is None:
        prepared_statements = not await dsn_through_pooler(dsn, wait_s=wait_s)
        if not prepared_statements:
            log.debug("the database is reached through a connection pooler: no prepared statements")
    if not prepared_statements:
        kwargs = {"statement_cache_size": 0, **kwargs}
    servers = Servers(dsn)
    if servers.several:
        kwargs = {"connect": servers.connect, **kwargs}

    async def factory() -> asyncpg.Pool:
        return await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            init=init_connection,
            server_settings=SERVER_SETTINGS,
            reset=_keep_session,
            **kwargs,
        )

    return await _with_retries(factory, wait_s)


async def connect(
    dsn: str, *, wait_s: float = 30.0, prepared_statements: bool = True
) -> asyncpg.Connection:
    """One dedicated connection (e.g. for LISTEN), with the same waiting rules."""

    servers = Servers(dsn)
    options: dict[str, Any] = {"server_settings": SERVER_SETTINGS}
    if not prepared_statements:
        options["statement_cache_size"] = 0

    async def factory() -> asyncpg.Connection:
        if servers.several:
            conn = await servers.connect(**options)
        else:
            conn = await asyncpg.connect(dsn, **options)
        await init_connection(conn)
        return conn

    return await _with_retries(factory, wait_s)


async def dsn_through_pooler(dsn: str, *, wait_s: float = 30.0) -> bool:
    """Whether ``dsn`` reaches PostgreSQL through a connection pooler such as PgBouncer
    (:mod:`.poolers` says how it tells), asked on a connection of its own."""
    conn = await connect(dsn, wait_s=wait_s, prepared_statements=False)
    try:
        return await through_pooler(conn)
    finally:
        await conn.close()
