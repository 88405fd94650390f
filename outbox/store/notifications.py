"""Notification settings (0021): where a tenant is told about its own delivery
trouble, and its last notifications. The notifications themselves are queued by
triggers (``queue_notification`` in schema.sql), in the transaction that buries a
task's webhook, holds a host's deliveries or closes its circuit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from hookrelay.outbox.models import EventId
from hookrelay.outbox.sql import sql

_GET = sql("notification_settings_get")
_PUT = sql("notification_settings_put")
_DELETE = sql("notification_settings_delete")
_RECENT = sql("recent_notifications")


@dataclass(frozen=True, slots=True)
class NotificationSettings:
    url: str
    events: tuple[str, ...]
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class SentNotification:
    """One notification queued for the tenant, and where it is now."""

    event_id: EventId
    event_type: str
    created_at: datetime
    state: str  # pending, dead, delivered (or unknown once purged)
    body: str


def _settings(row: asyncpg.Record | None) -> NotificationSettings | None:
    if row is None:
        return None
    return NotificationSettings(row["url"], tuple(row["events"]), row["updated_at"])


async def get_settings(conn: asyncpg.Connection, *, tenant_id: str) -> NotificationSettings | None:
    return _settings(await conn.fetchrow(_GET, tenant_id))


async def put_settings(
    conn: asyncpg.Connection, *, tenant_id: str, url: str, host: str, events: Sequence[str]
) -> NotificationSettings:
    found = _settings(await conn.fetchrow(_PUT, tenant_id, url, host, list(events)))
    assert found is not None  # an upsert returns its row
    return found


async def delete_settings(conn: asyncpg.Connection, *, tenant_id: str) -> bool:
    """Whether the tenant had settings."""
    status: str = await conn.execute(_DELETE, tenant_id)
    return status != "DELETE 0"


async def recent(conn: asyncpg.Connection, *, tenant_id: str, limit: int) -> list[SentNotification]:
    """The tenant's last ``limit`` notifications, newest first."""
    rows = await conn.fetch(_RECENT, tenant_id, limit)
    return [SentNotification(*r) for r in rows]
