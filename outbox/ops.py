"""Operator actions that leave a trace: replays (one, selected or by filter) and manual
circuit closes, each recorded in ``ops_audit`` with who, how many, the filter and why."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

import asyncpg

from .deadletters import replay_batch
from .models import iso
from .store import console as store
from .store.console import AuditEntry, EventView, MinuteCount, Overview
from .store.deadletters import DeadLetterFilter

__all__ = [
    "AuditEntry",
    "EventView",
    "MinuteCount",
    "Overview",
    "bulk_replay",
    "close_circuit",
    "preview_replay",
    "replay_selected",
]


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
    conn: asyncpg.Connection, flt: DeadLetterFilter, *, actor: str, reason: str
) -> int:
    """Replay every letter matching ``flt`` that had failed when the call began.

    Letters that die again while it runs fail after that instant, so one call
    takes each letter at most once.
    """
    start = await store.database_clock(conn)
    until = start if flt.until is None else min(flt.until, start)
    snapshot = replace(flt, until=until)
    done = 0
    while batch := await replay_batch(conn, snapshot, by=actor):
        done += len(batch)
    await store.audit(
        conn, actor=actor, action="bulk_replay", count=done, filter=_described(flt), reason=reason
    )
    return done


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
