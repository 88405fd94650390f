"""The pool: released connections come back clean without a reset round trip."""

from __future__ import annotations

import asyncpg
import pytest

pytestmark = pytest.mark.anyio


async def test_release_rolls_back_an_open_transaction(dsn: str) -> None:
    from outbox.db import create_pool

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
    from outbox.db import create_pool

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

    from outbox.db import TCP_OPTIONS, connect

    conn = await connect(dsn)
    try:
        sock = conn._transport.get_extra_info("socket")
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            pytest.skip("a Unix-socket server (the embedded one): no TCP options to set")
        for level, option, value in TCP_OPTIONS:
            assert sock.getsockopt(level, option) == value
    finally:
        await conn.close()
