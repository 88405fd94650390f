"""Operator actions that leave a trace: replays (one, selected or by filter) and manual
circuit closes, each recorded in ``ops_audit`` with who, how many, the filter and why.
The console, the API and the CLI all replay through here. The partner portal's other
actions (a redelivery, a settings change, a key rotation, a test event) are recorded
by :func:`record`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import asyncpg

from hookrelay.outbox.models import AuditAction, iso
from hookrelay.outbox.ops.dead_letters import replay_batch, replay_matching, replay_one
from hookrelay.outbox.store import console as store
from hookrelay.outbox.store.console import AuditEntry, EventView, MinuteCount, Overview
from hookrelay.outbox.store.deadletters import DeadLetterFilter

NO_REASON = "(no reason given)"


def tenant_actor(tenant_id: str) -> str:
    """How a partner's own replay is named in the audit trail and on the letter."""
    return f"tenant:{tenant_id}"


__all__ = [
    "NO_REASON",
    "AuditEntry",
    "EventView",
    "MinuteCount",
    "Overview",
    "bulk_replay",
    "close_circuit",
    "preview_replay",
    "record",
    "replay_audited",
    "replay_selected",
    "tenant_actor",
]


async def record(
    conn: asyncpg.Connection,
    *,
    actor: str,
    action: AuditAction,
    reason: str = NO_REASON,
    what: dict[str, Any] | None = None,
    count: int = 1,
) -> None:
    """One action in the audit trail: who, what to (``what``, shown as the filter), why."""
    await store.audit(
        conn, actor=actor, action=action, count=count, filter=what or {}, reason=reason
    )


def _described(flt: DeadLetterFilter) -> dict[str, Any]:
    return {
        k: (iso(v) if hasattr(v, "isoformat") else v)
        for k, v in asdict(flt).items()
        if v is not None
    }


async def preview_replay(conn: asyncpg.Connection, flt: DeadLetterFilter) -> int:
    """How many letters a bulk replay by ``flt`` would take now."""
    return await store.count_dead_letters(conn, flt=flt)


async def bulk_replay(
    conn: asyncpg.Connection,
    flt: DeadLetterFilter,
    *,
    actor: str,
    reason: str,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Replay every letter matching ``flt`` that had failed when the call began
    (each at most once, :func:`hookrelay.outbox.ops.dead_letters.replay_matching`), audited."""
    done = await replay_matching(conn, flt, by=actor, progress=progress)
    await store.audit(
        conn, actor=actor, action="bulk_replay", count=done, filter=_described(flt), reason=reason
    )
    return done


async def replay_audited(
    conn: asyncpg.Connection,
    event_id: str,
    *,
    actor: str,
    reason: str,
    tenant_id: str | None = None,
) -> None:
    """:func:`hookrelay.outbox.ops.dead_letters.replay_one`, audited; raises as it does.
    With ``tenant_id``, only that tenant's letter (a partner's replay)."""
    await replay_one(conn, event_id, by=actor, tenant_id=tenant_id)
    await store.audit(
        conn,
        actor=actor,
        action="replay",
        count=1,
        filter={"eventIds": [event_id]},
        reason=reason,
    )


async def replay_selected(
    conn: asyncpg.Connection, event_ids: Sequence[str], *, actor: str, reason: str
) -> int:
    """Replay the given letters (those still unreplayed); how many were."""
    done = 0
    for event_id in event_ids:
        done += len(await replay_batch(conn, DeadLetterFilter(event_id=event_id), by=actor))
    await store.audit(
        conn,
        actor=actor,
        action="replay",
        count=done,
        filter={"eventIds": list(event_ids)},
        reason=reason,
    )
    return done


async def close_circuit(conn: asyncpg.Connection, host: str, *, actor: str, reason: str) -> bool:
    """Close ``host``'s circuit now (audited); False if it was already closed."""
    async with conn.transaction():
        closed = await store.close_circuit(conn, host=host)
        if closed:
            await store.audit(
                conn,
                actor=actor,
                action="close_circuit",
                count=1,
                filter={"host": host},
                reason=reason,
            )
    return closed
