"""The dispatcher's statements: find due lanes, claim under a lease, hold, give back, record."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple
from uuid import UUID

import asyncpg

from hookrelay.outbox.models import CircuitState, EventId, Outcome, TaskId, TenantId
from hookrelay.outbox.sql import sql

_DUE_LANES = sql("due_lanes")
_CLAIM_LANES = sql("claim_lanes")
_CLAIM_PROBE = sql("claim_probe")
_HOLD_LANES = sql("hold_lanes")
_RELEASE_LEASES = sql("release_leases")
_DEFER_LEASES = sql("defer_leases")
_ABANDON_LEASES = sql("abandon_leases")
_RECORD_OUTCOMES = sql("record_outcomes")
_TAKE_HOST_TOKENS = sql("take_host_tokens")
_RETURN_HOST_TOKENS = sql("return_host_tokens")
_LOCK_ORDERING_KEYS = sql("lock_ordering_keys")
_LOCK_STUCK_KEYS = sql("lock_stuck_keys")
_RELEASE_STUCK_KEYS = sql("release_stuck_keys")


Key = tuple[str, str]  # an ordering key: (tenant_id, ordering_key)


@dataclass(frozen=True, slots=True)
class ClaimedEvent:
    """An outbox row this dispatcher holds a lease on."""

    id: int
    event_id: EventId
    tenant_id: TenantId
    task_id: TaskId | None  # None: a test event
    event_type: str
    callback_url: str
    host: str
    # None only if its stored event is gone (a database an older release purged
    # under a redelivery): nothing to send.
    body: bytes
    attempts: int
    budget_used: int
    # The tenant's signing-key version as of the claim (tenants.secret_version);
    # None if no such tenant (deleted before migration 0017 removed its rows too).
    secret_version: int
    token: UUID
    # Leases of this row that ran out in a row with no outcome written, this
    # claim's predecessor included (outbox.lost_leases).
    lost_leases: int = 0
    # The task's callback headers as claimed: sealed (keys.callback_headers), None for
    # none; the dispatcher opens them into ``callback_headers`` before the attempt.
    # Kept out of repr, so no log line of an event can show a value.
    headers_enc: bytes | None = field(default=None, repr=False)
    # The task's W3C trace context, ``[traceparent, tracestate]``; None when it has
    # none (a test event, or a task an older release submitted).
    trace: Sequence[str | None] | None = None
    callback_headers: Mapping[str, str] | None = field(default=None, repr=False)
    # The task's orderingKey: the key's next event waits until this one is
    # delivered or dead (None: delivered with no order).
    ordering_key: str | None = None

    @property
    def key(self) -> Key | None:
        """``(tenant_id, ordering_key)`` of a keyed event, else None."""
        return None if self.ordering_key is None else (self.tenant_id, self.ordering_key)


@dataclass(frozen=True, slots=True)
class DueLane:
    """A lane (one tenant's events to one host) with due rows."""

    host: str
    tenant_id: TenantId
    oldest: datetime  # when its oldest due row became due
    due: int  # rows due now, counted no further than the ``upto`` asked for
    state: CircuitState  # its host's circuit


async def due_lanes(conn: asyncpg.Connection, *, upto: int) -> list[DueLane]:
    """Every lane with due rows; the cost grows with lanes, not with rows held back."""
    return [DueLane(r[0], r[1], r[2], r[3], r[4]) for r in await conn.fetch(_DUE_LANES, upto)]


def _events(rows: Sequence[asyncpg.Record], token: UUID) -> list[ClaimedEvent]:
    # The hot path: one construction per row, positional in RETURNING's order.
    return [
        ClaimedEvent(
            r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], token,
            r[11], r[12], r[13], None, r[14],
        )
        for r in rows
    ]  # fmt: skip


async def claim_lanes(
    conn: asyncpg.Connection,
    *,
    lanes: Sequence[tuple[str, str, int]],
    lease_s: float,
    owner: str,
    token: UUID,
) -> list[ClaimedEvent]:
    """Lease at most ``n`` due events of each lane ``(host, tenant_id, n)``, oldest first.

    Hosts whose circuit is not closed are skipped.
    """
    if not lanes:
        return []
    hosts, tenants, counts = zip(*lanes, strict=True)
    rows = await conn.fetch(
        _CLAIM_LANES, list(hosts), list(tenants), list(counts), lease_s, owner, token
    )
    return _events(rows, token)


async def claim_probe(
    conn: asyncpg.Connection, *, host: str, lease_s: float, owner: str, token: UUID
) -> list[ClaimedEvent]:
    """Lease one event of ``host``, due or held, for the probe this caller was granted."""
    return _events(await conn.fetch(_CLAIM_PROBE, host, lease_s, owner, token), token)


async def hold_lanes(conn: asyncpg.Connection, *, hosts: Sequence[str], hold_s: float) -> None:
    """Move the due rows of ``hosts`` whose circuit is not closed out of every claim's way."""
    await conn.execute(_HOLD_LANES, list(hosts), hold_s)


async def release_leases(conn: asyncpg.Connection, *, ids: Sequence[int], token: UUID) -> None:
    """Give rows back untouched; rows no longer under ``token`` are left alone."""
    await conn.execute(_RELEASE_LEASES, ids, token)


async def defer_leases(
    conn: asyncpg.Connection,
    *,
    ids: Sequence[int],
    token: UUID,
    delay_s: float,
    counted: bool = False,
) -> None:
    """Give rows back unspent, due again in ``delay_s``; rows no longer under ``token``
    are left alone. ``counted``: the attempt failed with a bug of ours, which counts
    towards the row's lost leases."""
    await conn.execute(_DEFER_LEASES, ids, token, delay_s, counted)


async def abandon_leases(
    conn: asyncpg.Connection,
    *,
    rows: Sequence[tuple[int, str]],
    token: UUID,
    keys: Mapping[int, Key] | None = None,
) -> dict[int, bool]:
    """Dead-letter rows ``(id, why)`` held under ``token`` without an attempt. For each
    row that was still under it: whether it has a dead letter (False: its stored
    event was gone, so it was only removed). ``keys``: ``{id: (tenant_id,
    ordering_key)}`` of the keyed rows, which hand their keys on; a row whose key
    another transaction holds is left as it is (its lease runs out, and the next
    claim of it tries again)."""
    async with _keys_held(conn, keys or {}) as busy:
        rows = [r for r in rows if r[0] not in busy]
        if not rows:
            return {}
        ids, errors = zip(*rows, strict=True)
        found = await conn.fetch(_ABANDON_LEASES, list(ids), token, list(errors))
    return {r[0]: r[1] for r in found}


@contextlib.asynccontextmanager
async def _keys_held(conn: asyncpg.Connection, keys: Mapping[int, Key]) -> AsyncIterator[set[int]]:
    """A transaction holding the ordering keys of rows ``{id: key}``, for a write that
    takes those rows out of the outbox (``_hand_on_keys`` in queries.sql says why the
    lock comes first); yields the ids whose key another transaction holds, which the
    write must leave alone. With no keys, no transaction: the write runs alone."""
    if not keys:
        yield set()
        return
    wanted = sorted(set(keys.values()))
    async with conn.transaction():
        rows = await conn.fetch(_LOCK_ORDERING_KEYS, [k[0] for k in wanted], [k[1] for k in wanted])
        taken = {(r[0], r[1]) for r in rows}
        yield {i for i, key in keys.items() if key not in taken}


async def release_stuck_keys(conn: asyncpg.Connection, *, limit: int = 1000) -> list[EventId]:
    """The sweep of ordering keys: make due the first event of each key whose events
    all wait parked with none due or in flight (its head left the outbox without
    handing the key on, e.g. taken out by a process of an earlier release). Returns
    the events made due."""
    async with conn.transaction():
        stuck = await conn.fetch(_LOCK_STUCK_KEYS, limit)
        if not stuck:
            return []
        rows = await conn.fetch(_RELEASE_STUCK_KEYS, [r[0] for r in stuck], [r[1] for r in stuck])
    return [r[0] for r in rows]


class OutcomeRow(NamedTuple):
    """One attempt's outcome, as :func:`record_outcomes` writes it (a tuple, so that a
    batch turns into the statement's columns in one ``zip``)."""

    id: int
    token: UUID
    outcome: Outcome
    next_at: datetime | None
    status_code: int | None
    error: str | None
    attempted_at: datetime
    duration_ms: float
    response_prefix: str | None


async def record_outcomes(
    conn: asyncpg.Connection,
    *,
    outcomes: Sequence[OutcomeRow],
    breaker_threshold: int,
    breaker_probe_s: float,
    keys: Mapping[int, Key] | None = None,
    held: set[int] | None = None,
) -> set[int]:
    """Write a batch of outcomes in one statement; the ids whose lease still held.

    Outcomes of rows another dispatcher took over are dropped (fenced on the
    token). ``keys``: ``{id: (tenant_id, ordering_key)}`` of the batch's keyed rows
    that leave the outbox (delivered or dead), which hand their keys on. An outcome
    whose key another transaction holds is not written: its id goes into ``held``,
    for the caller to write again later. Raises asyncpg errors as they come: the
    recorder decides to retry.
    """
    async with _keys_held(conn, keys or {}) as busy:
        if busy:
            outcomes = [o for o in outcomes if o.id not in busy]
            if held is not None:
                held.update(busy)
        cols = [list(col) for col in zip(*outcomes, strict=True)] if outcomes else [[]] * 9
        rows = await conn.fetch(_RECORD_OUTCOMES, *cols, breaker_threshold, float(breaker_probe_s))
    return {r[0] for r in rows}


async def take_host_tokens(
    conn: asyncpg.Connection, *, wanted: Mapping[str, int], rate: float, burst: float
) -> dict[str, int]:
    """How many of ``wanted`` requests to each host their shared buckets grant now."""
    hosts = sorted(wanted)
    rows = await conn.fetch(_TAKE_HOST_TOKENS, hosts, [wanted[h] for h in hosts], rate, burst)
    return {r[0]: r[1] for r in rows}


async def return_host_tokens(
    conn: asyncpg.Connection, *, unused: Mapping[str, int], burst: float
) -> None:
    """Put tokens granted and not used back into the hosts' buckets."""
    hosts = sorted(unused)
    await conn.execute(_RETURN_HOST_TOKENS, hosts, [unused[h] for h in hosts], burst)
