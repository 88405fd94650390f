"""A tenant's notification settings: where it is told that its webhooks died
(``delivery.dead``) or that a host's circuit holds them (``destination.unhealthy``,
then ``destination.recovered``). The caller checks the URL as a callback URL first;
the notifications are queued by the database's triggers (0021) and delivered
through the outbox, signed with the tenant's secret like its webhooks."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from hookrelay.outbox.destinations import host_key
from hookrelay.outbox.store import notifications as store
from hookrelay.outbox.store.notifications import NotificationSettings, SentNotification

__all__ = [
    "NOTIFICATION_TYPES",
    "NotificationSettings",
    "SentNotification",
    "delete_notifications",
    "get_notifications",
    "recent_notifications",
    "set_notifications",
]

# Every type a tenant may be told about, in the order the API lists them.
NOTIFICATION_TYPES: tuple[str, ...] = (
    "delivery.dead",
    "destination.unhealthy",
    "destination.recovered",
)


async def get_notifications(
    conn: asyncpg.Connection, tenant_id: str
) -> NotificationSettings | None:
    return await store.get_settings(conn, tenant_id=tenant_id)


async def set_notifications(
    conn: asyncpg.Connection, tenant_id: str, url: str, events: Sequence[str] | None = None
) -> NotificationSettings:
    """Tell ``tenant_id`` at ``url`` about ``events`` (each once, in the API's order;
    None: all of them)."""
    chosen = [t for t in NOTIFICATION_TYPES if events is None or t in events]
    return await store.put_settings(
        conn, tenant_id=tenant_id, url=url, host=host_key(url), events=chosen
    )


async def delete_notifications(conn: asyncpg.Connection, tenant_id: str) -> bool:
    """Stop notifying ``tenant_id``; whether it had a URL set."""
    return await store.delete_settings(conn, tenant_id=tenant_id)


async def recent_notifications(
    conn: asyncpg.Connection, tenant_id: str, *, limit: int = 20
) -> list[SentNotification]:
    return await store.recent(conn, tenant_id=tenant_id, limit=limit)
