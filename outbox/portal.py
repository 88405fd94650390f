"""The partner portal's core: single-use links, the check of an open session, and
what the portal reads of one tenant beyond the other areas (its task list with
filters, its delivery figures).

A link carries a random token (``hrp_``, 256 bits); only its SHA-256 is stored, with
the tenant's API key hash at the time. Opening it is one UPDATE that stamps it, so
it opens once, before its deadline, and only while the tenant keeps that key. The
session it opens holds a tag of that key hash, checked at every request
(:func:`session_tenant`): the tenant's key rotation or deletion ends it at once.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from hookrelay.outbox import ids
from hookrelay.outbox.errors import TenantNotFound
from hookrelay.outbox.models import Task
from hookrelay.outbox.store import portal as store
from hookrelay.outbox.store.console import MinuteCount
from hookrelay.outbox.store.portal import (
    Durations,
    OpenCircuit,
    OpenedLink,
    OutcomeCount,
    TaskFilter,
)

__all__ = [
    "LINK_TTL_S",
    "SESSION_MAX_S",
    "Durations",
    "NewLink",
    "OpenCircuit",
    "OpenedLink",
    "OutcomeCount",
    "TaskFilter",
    "TenantOverview",
    "issue_link",
    "open_link",
    "session_tag",
    "session_tenant",
    "task_page",
    "tenant_overview",
]

LINK_TTL_S = 15 * 60  # to open a link
SESSION_MAX_S = 12 * 3600  # the session it opens, at most


@dataclass(frozen=True, slots=True)
class NewLink:
    token: str
    expires_at: datetime

    def __repr__(self) -> str:
        return f"NewLink(token=***, expires_at={self.expires_at!r})"


def _hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def session_tag(api_key_hash: bytes) -> str:
    """What a session remembers of the tenant's key: enough to notice it changed,
    nothing that helps to find it."""
    return hashlib.sha256(b"hookrelay-portal-key\0" + api_key_hash).hexdigest()[:32]


async def issue_link(
    conn: asyncpg.Connection,
    tenant_id: str,
    *,
    read_only: bool,
    created_by: str,
    ttl_s: float = LINK_TTL_S,
) -> NewLink:
    """A new single-use link's token (shown once) and opening deadline."""
    token = ids.portal_token()
    async with conn.transaction():
        await store.purge_links(conn)
        expires = await store.insert_link(
            conn,
            token_hash=_hash(token),
            tenant_id=tenant_id,
            read_only=read_only,
            created_by=created_by,
            ttl_s=ttl_s,
        )
    if expires is None:
        raise TenantNotFound(tenant_id)
    return NewLink(token, expires)


async def open_link(conn: asyncpg.Connection, token: str) -> OpenedLink | None:
    """Open the link once: None if unknown, opened before, expired, or made under a
    key the tenant has since rotated (which of these is not told)."""
    if not token.startswith("hrp_") or len(token) > 100:
        return None
    return await store.open_link(conn, token_hash=_hash(token))


async def session_tenant(conn: asyncpg.Connection, tenant_id: str, tag: str) -> str | None:
    """The tenant's name while a session tagged ``tag`` still holds (the tenant exists,
    under the same API key); None once it is over."""
    found = await store.tenant_key(conn, tenant_id=tenant_id)
    if found is None or not hmac.compare_digest(session_tag(found.api_key_hash), tag):
        return None
    return found.name


async def task_page(
    conn: asyncpg.Connection,
    tenant_id: str,
    flt: TaskFilter,
    *,
    before: tuple[datetime, str] | None,
    limit: int = 50,
) -> tuple[list[Task], tuple[datetime, str] | None]:
    """The tenant's tasks, latest change first, and the keyset position of the next page."""
    rows = await store.tasks(conn, tenant_id=tenant_id, flt=flt, before=before, limit=limit + 1)
    page = rows[:limit]
    more = len(rows) > limit
    return page, ((page[-1].updated_at, page[-1].id) if more and page else None)


@dataclass(frozen=True, slots=True)
class TenantOverview:
    """One tenant's last day of deliveries, for the portal's first page."""

    outcomes: list[OutcomeCount]
    durations: Durations
    per_hour: list[MinuteCount]
    circuits: list[OpenCircuit]

    def total(self, window: str) -> int:
        return sum(getattr(o, window) for o in self.outcomes)

    def count(self, outcome: str, window: str) -> int:
        return sum(getattr(o, window) for o in self.outcomes if o.outcome == outcome)

    def success_rate(self, window: str) -> float | None:
        """Delivered attempts over every attempt; None without any."""
        total = self.total(window)
        return self.count("delivered", window) / total if total else None


async def tenant_overview(conn: asyncpg.Connection, tenant_id: str) -> TenantOverview:
    return TenantOverview(
        outcomes=await store.delivery_figures(conn, tenant_id=tenant_id),
        durations=await store.attempt_durations(conn, tenant_id=tenant_id),
        per_hour=await store.deliveries_per_hour(conn, tenant_id=tenant_id),
        circuits=await store.open_circuits(conn, tenant_id=tenant_id),
    )
