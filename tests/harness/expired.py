"""A backlog past retention, for the purge's test and benchmark alike."""

from __future__ import annotations

import asyncpg


async def expired_backlog(conn: asyncpg.Connection, tenant_id: str, n: int) -> None:
    """``n`` tasks finished 100 days ago and delivered, each with its stored event, an
    idempotency key and two attempts 40 days old: all past the default retention.
    Their ids start with ``old_`` (see :func:`left_to_purge`)."""
    await conn.execute(
        """
        INSERT INTO tasks (id, tenant_id, type, status, callback_url, created_at, updated_at,
                           completed_at, event_id, delivery_status, delivery_attempts)
        SELECT 'old_task_' || g, $1, 't', 'succeeded', 'http://127.0.0.1:9/h',
               now() - interval '101 days', now() - interval '100 days',
               now() - interval '100 days', 'old_evt_' || g, 'delivered', 2
          FROM generate_series(1, $2) g""",
        tenant_id,
        n,
    )
    await conn.execute(
        """
        INSERT INTO events (event_id, tenant_id, task_id, event_type, body, created_at)
        SELECT 'old_evt_' || g, $1, 'old_task_' || g, 'task.succeeded', '{"old": true}',
               now() - interval '100 days'
          FROM generate_series(1, $2) g""",
        tenant_id,
        n,
    )
    await conn.execute(
        """
        INSERT INTO idempotency_keys (tenant_id, key, request_hash, task_id, created_at)
        SELECT $1, 'old_key_' || g, '\\x00', 'old_task_' || g, now() - interval '101 days'
          FROM generate_series(1, $2) g""",
        tenant_id,
        n,
    )
    await conn.execute(
        """
        INSERT INTO delivery_attempts (event_id, task_id, tenant_id, number, attempted_at,
                                       duration_ms, outcome, status_code)
        SELECT 'old_evt_' || g, 'old_task_' || g, $1, k, now() - interval '40 days', 1,
               CASE k WHEN 1 THEN 'retry' ELSE 'delivered' END, CASE k WHEN 1 THEN 500 ELSE 204 END
          FROM generate_series(1, $2) g, generate_series(1, 2) k""",
        tenant_id,
        n,
    )


async def left_to_purge(conn: asyncpg.Connection | asyncpg.Pool) -> tuple[int, int, int, int]:
    """Rows of :func:`expired_backlog` still there: (tasks, events, keys, attempts)."""
    row = await conn.fetchrow(
        """
        SELECT (SELECT count(*) FROM tasks WHERE starts_with(id, 'old_task_')),
               (SELECT count(*) FROM events WHERE starts_with(event_id, 'old_evt_')),
               (SELECT count(*) FROM idempotency_keys WHERE starts_with(key, 'old_key_')),
               (SELECT count(*) FROM delivery_attempts WHERE starts_with(event_id, 'old_evt_'))"""
    )
    assert row is not None
    return (row[0], row[1], row[2], row[3])
