"""The pool: released connections come back clean without a reset round trip."""

from __future__ import annotations

import asyncpg
import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


async def test_release_rolls_back_an_open_transaction(dsn: str) -> None:
    from hookrelay.outbox.store.pool import create_pool

    pool = await create_pool(dsn, min_size=1, max_size=1)
    try:
        conn = await pool.acquire()
        tx = conn.transaction()
        await tx.start()
        await conn.execute("CREATE TABLE left_open (x int)")
        await pool.release(conn)
        async with pool.acquire() as again:
            assert not again.is_in_transaction()
            assert await again.fetchval("SELECT to_regclass('left_open')") is None
    finally:
        await pool.close()


async def test_release_sends_no_reset_query(dsn: str) -> None:
    from hookrelay.outbox.store.pool import create_pool

    pool = await create_pool(dsn, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            pid = await conn.fetchval("SELECT pg_backend_pid()")
        async with asyncpg.create_pool(dsn, min_size=1, max_size=1) as probe:
            last = await probe.fetchval("SELECT query FROM pg_stat_activity WHERE pid = $1", pid)
        assert "RESET ALL" not in last and "pg_backend_pid" in last
    finally:
        await pool.close()


async def test_tcp_connections_notice_a_vanished_server(dsn: str) -> None:
    """Keepalive and TCP_USER_TIMEOUT are set, so a dead peer is noticed in seconds."""
    import socket

    from hookrelay.outbox.store.pool import TCP_OPTIONS, connect

    conn = await connect(dsn)
    try:
        sock = conn._transport.get_extra_info("socket")
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            pytest.skip("a Unix-socket server (the embedded one): no TCP options to set")
        for level, option, value in TCP_OPTIONS:
            assert sock.getsockopt(level, option) == value
    finally:
        await conn.close()


def test_a_dsn_listing_several_servers_is_split_per_server() -> None:
    from hookrelay.outbox.store.pool import Servers

    dsn = "postgresql://u:pw@a:5432,b:6432,[::1]:5433/db?target_session_attrs=read-write"
    assert Servers(dsn).dsns == [
        "postgresql://u:pw@a:5432/db?target_session_attrs=read-write",
        "postgresql://u:pw@b:6432/db?target_session_attrs=read-write",
        "postgresql://u:pw@[::1]:5433/db?target_session_attrs=read-write",
    ]
    assert not Servers("postgresql://u@a/db").several


async def test_a_silent_first_server_costs_only_its_own_deadline(dsn: str, monkeypatch) -> None:
    """A first server that accepts and never answers (its machine gone) is passed over.

    asyncpg gives the whole list one deadline, which such a server used up; here each
    server has its own, and the one that answered is tried first from then on.
    """
    import socket
    from urllib.parse import urlsplit

    from hookrelay.outbox.store import pool as db

    parts = urlsplit(dsn)
    if not parts.hostname or parts.hostname.startswith("/"):
        pytest.skip("a Unix-socket server (the embedded one): no TCP address to list")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the handshake; nobody ever answers
    try:
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{silent.getsockname()[1]},{parts.netloc.rpartition('@')[2]}"
        listed = parts._replace(netloc=netloc).geturl()
        monkeypatch.setattr(db, "SERVER_CONNECT_S", 0.5)
        pool = await db.create_pool(listed, min_size=1, max_size=2, wait_s=10)
        try:
            assert await pool.fetchval("SELECT 1") == 1
            async with pool.acquire() as a, pool.acquire() as b:  # the second goes straight there
                assert await a.fetchval("SELECT 1") == await b.fetchval("SELECT 1") == 1
        finally:
            await pool.close()
        conn = await db.connect(listed, wait_s=10)
        await conn.close()
    finally:
        silent.close()
